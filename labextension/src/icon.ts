/**
 * The GPU icon used by the sidebar tab and the status bar item; themed through `jp-icon3`.
 */
import { LabIcon } from '@jupyterlab/ui-components';

import gpuSvgStr from '../style/icons/gpu.svg';

export const gpuIcon = new LabIcon({ name: 'jupyter-gpuburst:gpu', svgstr: gpuSvgStr });

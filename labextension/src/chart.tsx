/**
 * A small SVG time-series chart: no chart library, themed with JupyterLab CSS variables.
 */
import * as React from 'react';

/** A point: time in seconds and a value in [0, 1] (null = unknown, leaves a gap). */
export interface IChartPoint {
  t: number;
  v: number | null;
}

const WIDTH = 240;
const HEIGHT = 48;
// Keeps a flat 0 % or 100 % line inside the box instead of half-clipped at its edge.
const PAD = 2;

/** Seconds the x axis spans: the data's age, from `minSeconds` up to the full window. */
export function visibleSpan(
  points: readonly IChartPoint[],
  windowSeconds: number,
  end: number,
  minSeconds = 30
): number {
  // A fresh panel would otherwise draw a few seconds of data as a sliver at the right edge.
  const age = points.length ? end - points[0].t : 0;
  return Math.max(Math.min(minSeconds, windowSeconds), Math.min(windowSeconds, age));
}

/** SVG path ("M x y L x y ...") of the points over the window [end - windowSeconds, end]. */
export function chartPath(points: readonly IChartPoint[], windowSeconds: number, end: number): string {
  const start = end - windowSeconds;
  let path = '';
  let pen = false;
  for (const p of points) {
    if (p.v == null || !Number.isFinite(p.v) || p.t < start) {
      pen = false;
      continue;
    }
    const x = ((p.t - start) / windowSeconds) * WIDTH;
    const y = HEIGHT - PAD - Math.min(1, Math.max(0, p.v)) * (HEIGHT - 2 * PAD);
    path += `${pen ? 'L' : 'M'}${x.toFixed(1)} ${y.toFixed(1)} `;
    pen = true;
  }
  return path.trim();
}

export interface IChartProps {
  /** Accessible name, e.g. "GPU 0 utilization over the last 5 minutes". */
  label: string;
  /** Current value shown beside the title. */
  valueText: string;
  title: string;
  points: readonly IChartPoint[];
  windowSeconds: number;
  end: number;
  kind: 'utilization' | 'memory';
}

export function Chart(props: IChartProps): JSX.Element {
  const d = chartPath(props.points, visibleSpan(props.points, props.windowSeconds, props.end), props.end);
  return (
    <figure className={`jp-GpuBurst-chart jp-GpuBurst-chart-${props.kind}`}>
      <figcaption>
        <span>{props.title}</span>
        <span className="jp-GpuBurst-chartValue">{props.valueText}</span>
      </figcaption>
      <svg
        role="img"
        aria-label={`${props.label}: now ${props.valueText}`}
        viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
        preserveAspectRatio="none"
      >
        <line className="jp-GpuBurst-gridline" x1="0" x2={WIDTH} y1={HEIGHT / 2} y2={HEIGHT / 2} />
        {d && <path className="jp-GpuBurst-line" d={d} />}
      </svg>
    </figure>
  );
}

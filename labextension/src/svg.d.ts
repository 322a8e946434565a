// SVG files are bundled as strings by JupyterLab's builder (webpack asset/source).
declare module '*.svg' {
  const value: string;
  export default value;
}

import { useEffect, useLayoutEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

/** Every chart is this tall from its first render, before any point arrives, so that nothing below it moves. */
export const CHART_HEIGHT_PX = 150;

/** Colours that read on both themes; a series keeps its colour across charts by its index. */
const COLOURS = ['#2f6fed', '#e8590c', '#1f8a4c', '#ae3ec9', '#c8322b', '#0b7285', '#b7791f', '#5c7cfa'];

export interface ChartSeries {
  label: string;
}

/**
 * A time series chart drawn by uPlot: `times` in seconds since the epoch, one array of values per series (null
 * where there is none). It is made once and given new data as it comes; its width follows its box.
 */
export function TimeChart({ title, series, times, values, unit, max }: {
  title: string;
  series: ChartSeries[];
  times: number[];
  values: (number | null)[][];
  unit: string;
  /** The top of the scale when it is known (100 for a percentage, a total of memory); else the data's. */
  max?: number;
}) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const data = [times, ...values] as uPlot.AlignedData;

  useLayoutEffect(() => {
    const element = box.current!;
    // A canvas does not follow the page's colour: the axes take the theme's text colour when the chart is made.
    const ink = getComputedStyle(element).color;
    plot.current = new uPlot({
      width: Math.max(element.clientWidth, 200),
      height: CHART_HEIGHT_PX - 30,
      legend: { show: true, live: false },
      cursor: { drag: { x: false, y: false } },
      // One point alone would get uPlot's span of a day counted in milliseconds, read here as seconds: show a minute.
      scales: { x: { time: true, range: (self, min, maxTime) => (self.data[0].length === 1 ? [self.data[0][0]! - 60, self.data[0][0]! + 5] : [min, maxTime]) }, y: { range: (_self, min, dataMax) => [Math.min(0, min ?? 0), max ?? Math.max(dataMax ?? 0, 1) * 1.1] } },
      axes: [
        { stroke: ink, grid: { stroke: 'rgba(128,128,128,0.15)' }, ticks: { stroke: 'rgba(128,128,128,0.3)' }, space: 80, values: (_self, ticks) => ticks.map(clockTime) },
        { stroke: ink, grid: { stroke: 'rgba(128,128,128,0.15)' }, ticks: { stroke: 'rgba(128,128,128,0.3)' }, size: 56, values: (_self, ticks) => ticks.map((tick) => `${formatValue(tick)}${unit}`) },
      ],
      series: [{}, ...series.map((one, index) => ({
        label: one.label, stroke: COLOURS[index % COLOURS.length], width: 1.5, points: { show: (self: uPlot) => self.data[0].length < 30, size: 4 },
      }))],
    }, data, element);
    const resized = new ResizeObserver(() => plot.current?.setSize({ width: Math.max(element.clientWidth, 200), height: CHART_HEIGHT_PX - 30 }));
    resized.observe(element);
    return () => {
      resized.disconnect();
      plot.current?.destroy();
      plot.current = null;
    };
  }, [series.map((one) => one.label).join('\n'), unit, max]);

  useEffect(() => {
    plot.current?.setData(data);
  });

  return (
    <figure class="chart" aria-label={title} data-points={times.length}>
      <figcaption>{title}</figcaption>
      <div class="chart-plot" ref={box} />
    </figure>
  );
}

/** A tick of the time axis, on one line (uPlot would put the date under the first, over its neighbour): the charts show recent minutes. */
function clockTime(seconds: number): string {
  return new Date(seconds * 1000).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });
}

function formatValue(value: number): string {
  const size = Math.abs(value);
  if (size >= 1000) return `${Math.round(value).toLocaleString()}`;
  if (size >= 10 || size === 0) return `${Math.round(value * 10) / 10}`;
  return `${Math.round(value * 100) / 100}`;
}

/** Sums the samples of one Prometheus metric whose labels include all of `labels`. */
export function metricValue(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    // Whole label names: `service="x"` must not match inside `source_service="x"`.
    const matches = Object.entries(labels).every(([k, v]) => line.includes(`{${k}="${v}"`) || line.includes(`,${k}="${v}"`));
    if (matches) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

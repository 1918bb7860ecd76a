import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export interface Metrics {
  readonly registry: Registry;
  counter(name: string, help: string, labelNames?: readonly string[]): Counter<string>;
  gauge(name: string, help: string, labelNames?: readonly string[]): Gauge<string>;
  histogram(name: string, help: string, labelNames?: readonly string[], buckets?: readonly number[]): Histogram<string>;
  render(): Promise<string>;
}

/**
 * A registry per service instance (no global default registry), so two services in one test
 * process never mix their series. Metric constructors are memoised by name.
 */
export function createMetrics({ service, defaults = true }: { service: string; defaults?: boolean }): Metrics {
  const registry = new Registry();
  registry.setDefaultLabels({ service });
  if (defaults) collectDefaultMetrics({ register: registry });
  const made = new Map<string, Counter<string> | Gauge<string> | Histogram<string>>();
  const memo = <M extends Counter<string> | Gauge<string> | Histogram<string>>(name: string, make: () => M): M => {
    const found = made.get(name);
    if (found) return found as M;
    const metric = make();
    made.set(name, metric);
    return metric;
  };
  return {
    registry,
    counter: (name, help, labelNames = []) => memo(name, () => new Counter({ name, help, labelNames, registers: [registry] })),
    gauge: (name, help, labelNames = []) => memo(name, () => new Gauge({ name, help, labelNames, registers: [registry] })),
    histogram: (name, help, labelNames = [], buckets = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5]) =>
      memo(name, () => new Histogram({ name, help, labelNames, buckets: [...buckets], registers: [registry] })),
    render: () => registry.metrics(),
  };
}

import { createLogger } from '@labelflow/telemetry';
import { loadConfig, runUntilSignal } from '@labelflow/service-kit';
import { SagaMonitorConfig } from './config';
import { startSagaMonitor } from './run';

// Logs only until the configuration is validated; the monitor then logs at its configured level.
const bootLogger = createLogger({ service: 'saga-monitor' });
void runUntilSignal(bootLogger, async () => (await startSagaMonitor(loadConfig(SagaMonitorConfig, process.env))).lifecycle);

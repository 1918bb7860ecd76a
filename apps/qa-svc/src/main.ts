import { createLogger } from '@labelflow/telemetry';
import { loadConfig, runUntilSignal, startService } from '@labelflow/service-kit';
import { QaSvcConfig } from './config';
import { qaService } from './service';

// Logs only until the configuration is validated; the service then logs at its configured level.
const bootLogger = createLogger({ service: 'qa-svc' });
void runUntilSignal(bootLogger, async () => (await startService(qaService, loadConfig(QaSvcConfig, process.env))).lifecycle);

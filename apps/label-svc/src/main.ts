import { createLogger } from '@labelflow/telemetry';
import { loadConfig, runUntilSignal, startService } from '@labelflow/service-kit';
import { LabelSvcConfig } from './config';
import { labelService } from './service';

// Logs only until the configuration is validated; the service then logs at its configured level.
const bootLogger = createLogger({ service: 'label-svc' });
void runUntilSignal(bootLogger, async () => (await startService(labelService, loadConfig(LabelSvcConfig, process.env))).lifecycle);

import { createLogger } from '@labelflow/telemetry';
import { loadConfig, runUntilSignal, startService } from '@labelflow/service-kit';
import { BillingSvcConfig } from './config';
import { billingService } from './service';

// Logs only until the configuration is validated; the service then logs at its configured level.
const bootLogger = createLogger({ service: 'billing-svc' });
void runUntilSignal(bootLogger, async () => (await startService(billingService, loadConfig(BillingSvcConfig, process.env))).lifecycle);

import { createLogger } from '@labelflow/telemetry';
import { loadConfig, runUntilSignal, startService } from '@labelflow/service-kit';
import { TaskSvcConfig } from './config';
import { taskService } from './service';

// Logs only until the configuration is validated; the service then logs at its configured level.
const bootLogger = createLogger({ service: 'task-svc' });
void runUntilSignal(bootLogger, async () => (await startService(taskService, loadConfig(TaskSvcConfig, process.env))).lifecycle);

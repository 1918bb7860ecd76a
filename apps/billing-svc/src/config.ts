import { z } from 'zod';
import { BaseConfig } from '@labelflow/service-kit';

export const BillingSvcConfig = BaseConfig.extend({
  PORT: BaseConfig.shape.PORT.default(3004),
  /** Fault injection for tests: billing fails (INJECTED_FAILURE) for annotators whose id starts with this (billing/faults.ts). */
  FAULT_BILLING_FAILURE_PREFIX: z.string().max(128).default(''),
});
export type BillingSvcConfig = ReturnType<typeof BillingSvcConfig.parse>;

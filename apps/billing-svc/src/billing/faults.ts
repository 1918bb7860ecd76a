import type { BillingSvcConfig } from '../config';
import { noFaults, type BillingFaults } from './decide';

/** FAULT_BILLING_FAILURE_PREFIX as billing's fault port: annotators whose id starts with it are never paid; empty, nobody. */
export const faultsOf = ({ FAULT_BILLING_FAILURE_PREFIX: prefix }: Pick<BillingSvcConfig, 'FAULT_BILLING_FAILURE_PREFIX'>): BillingFaults =>
  prefix === '' ? noFaults : { billingFails: (annotatorId) => annotatorId.startsWith(prefix) };

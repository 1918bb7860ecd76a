import { describe, expect, it } from 'vitest';
import { limitHeapGrowth } from './heap';

describe('service-kit: limitHeapGrowth', () => {
  it('refuses a percent that is negative or not a whole number, before touching any V8 flag', () => {
    for (const bad of [-1, 1.5, Number.NaN]) expect(() => limitHeapGrowth(bad), String(bad)).toThrow(expect.objectContaining({ code: 'CONFIG_INVALID' }));
  });
});

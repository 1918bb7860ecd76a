// Types of check-compose.mjs (plain JS so that it runs with node alone, for the unit test in TS).

export declare const APP_SERVICES: readonly string[];

export type InterpolationPart = { literal: string } | { name: string; op: '' | ':-' | '-' | ':?' | '?' | ':+' | '+'; arg: string };

export interface UrlCredentials {
  scheme: string;
  user: string | null;
  password: string | null;
  passwordMayBeEmpty: boolean;
}

export interface CheckOptions {
  /** Services allowed to publish ports by default (default APP_SERVICES). */
  appServices?: readonly string[];
}

export declare function parseCompose(text: string): Record<string, unknown>;
export declare function interpolations(value: string): InterpolationPart[];
export declare function mayBeEmpty(value: string | null | undefined): boolean;
export declare function environmentOf(service: unknown): [string, string | null][];
export declare function urlCredentials(value: string): UrlCredentials | null;
export declare function hostIpOf(port: unknown): string | null;
export declare function targetOf(port: unknown): string;
export declare function checkCompose(doc: unknown, options?: CheckOptions): string[];
export declare function checkComposeText(text: string, options?: CheckOptions): string[];

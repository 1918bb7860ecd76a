import { describe, expect, it } from 'vitest';
import { DataUri } from './index';

describe('a task\'s data URI in a command', () => {
  it.each(['https://cdn.example.com/cats/1.jpg', 'http://10.0.0.1/x', 's3://bucket/key with space.jpg', 'GS://bucket/1', 'az://c/b', 'abfss://fs@acct.dfs.core.windows.net/p'])('takes %s', (uri) => {
    expect(DataUri.safeParse(uri).success).toBe(true);
  });

  it.each(['javascript:alert(1)', 'data:image/png;base64,AAAA', 'file:///etc/passwd', 'cats/1.jpg', 's3://', 'https:// x', `s3://b/${'k'.repeat(2048)}`])('refuses %s', (uri) => {
    expect(DataUri.safeParse(uri).success).toBe(false);
  });
});

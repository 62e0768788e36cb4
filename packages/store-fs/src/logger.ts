/** Where the store reports what it did on its own (torn tails cut, compactions). Silent by default. */
export interface StoreLogger {
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
}

export const silentLogger: StoreLogger = {
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
};

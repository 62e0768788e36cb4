import type { ServerResponse } from "node:http";

/**
 * Destroys `res` once its unsent bytes pass `limit` (the SDK writes its answers without waiting for
 * the socket to drain): the WebSocket path's `maxBufferedBytes`, for a reader that never reads.
 */
export function boundBuffered(res: ServerResponse, limit: number, onExceeded: () => void): void {
  const write = res.write.bind(res) as (...args: unknown[]) => boolean;
  res.write = ((...args: unknown[]) => {
    const accepted = write(...args);
    if (res.writableLength > limit && !res.destroyed) {
      onExceeded();
      res.destroy();
    }
    return accepted;
  }) as typeof res.write;
}

import type { AuditInput } from "../audit-service";

/** Where refusals are written (the audit service in the gateway, a list in tests). */
export type AuditSink = (input: AuditInput) => Promise<unknown>;

export interface RefusalAuditOptions {
  /** Refusals recorded one by one per actor and window; the rest are counted into one summary. */
  perWindow?: number;
  windowMs?: number;
  now?: () => number;
}

interface Window {
  start: number;
  recorded: number;
  suppressed: number;
}

/**
 * Records refused requests, bounded per actor. The windows are what only one process knows: a
 * cluster would share them (or accept one bound per instance) behind this interface.
 */
export interface RefusalLog {
  refused(actor: string, data: Record<string, unknown>, sessionKey?: string): Promise<void>;
}

/**
 * Audits refused requests (a client touching another session, a worker touching a run it does not
 * hold, a `/send` from a non-operator) without letting a flood grow the log without bound: per actor
 * (token name, a bounded set from the config) at most `perWindow` records a window, then one
 * `access.refused.suppressed` record with the count when the next window opens.
 */
export class RefusalAudit implements RefusalLog {
  private readonly windows = new Map<string, Window>();
  private readonly perWindow: number;
  private readonly windowMs: number;
  private readonly now: () => number;

  constructor(
    private readonly sink: AuditSink,
    options: RefusalAuditOptions = {},
  ) {
    this.perWindow = options.perWindow ?? 20;
    this.windowMs = options.windowMs ?? 60_000;
    this.now = options.now ?? Date.now;
  }

  async refused(actor: string, data: Record<string, unknown>, sessionKey?: string): Promise<void> {
    const now = this.now();
    let window = this.windows.get(actor);
    if (!window || now - window.start >= this.windowMs) {
      if (window && window.suppressed > 0) {
        await this.sink({
          kind: "access.refused.suppressed",
          actor,
          data: { count: window.suppressed, windowStart: window.start, windowMs: this.windowMs },
        });
      }
      window = { start: now, recorded: 0, suppressed: 0 };
      this.windows.set(actor, window);
    }
    if (window.recorded >= this.perWindow) {
      window.suppressed += 1;
      return;
    }
    window.recorded += 1;
    await this.sink({ kind: "access.refused", actor, ...(sessionKey ? { sessionKey } : {}), data });
  }
}

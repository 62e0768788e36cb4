import { type Logger, SwitchboardError } from "@switchboard/core";
import type pg from "pg";
import { connectionFault, type ErrorContext, isDroppedConnection, toStoreError } from "./errors";

/** The first failure of the current unhealthy stretch, for `health()`. */
export interface Fault {
  cause: string;
  since: string;
}

/**
 * The pool with the store's error rules around it: every failure leaves as a SwitchboardError
 * (UNAVAILABLE when the database is unreachable), reads are retried once on a fresh connection
 * (a pool keeps connections the server may have dropped while idle, e.g. across a restart), and
 * the first connection fault is remembered for `health()` until a query works again.
 */
export class Db {
  private closed = false;
  private fault: Fault | undefined;

  constructor(
    readonly pool: pg.Pool,
    private readonly where: Omit<ErrorContext, "action">,
    private readonly logger: Logger,
  ) {}

  get isClosed(): boolean {
    return this.closed;
  }

  /** The fault since the last successful query, if any. */
  currentFault(): Fault | undefined {
    return this.fault;
  }

  private assertOpen(): void {
    if (this.closed) throw new SwitchboardError("UNAVAILABLE", "store is closed");
  }

  private fail(error: unknown, action: string): SwitchboardError {
    const wrapped = toStoreError(error, { ...this.where, action });
    if (wrapped.code === "UNAVAILABLE" && !this.closed) {
      const cause = connectionFault(error) ?? wrapped.message;
      if (this.fault === undefined) {
        this.fault = { cause, since: new Date().toISOString() };
        this.logger.warn({ target: this.where.target, cause, action }, "PostgreSQL unavailable");
      }
    }
    return wrapped;
  }

  private succeeded(): void {
    if (this.fault !== undefined) {
      this.logger.info({ target: this.where.target, since: this.fault.since }, "PostgreSQL reachable again");
      this.fault = undefined;
    }
  }

  /** One statement (its own transaction). Not retried: a write may have committed before the failure. */
  async query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    action: string,
    text: string,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>> {
    this.assertOpen();
    try {
      const result = await this.pool.query<R>(text, values);
      this.succeeded();
      return result;
    } catch (error) {
      throw this.fail(error, action);
    }
  }

  /**
   * A read-only statement, tried a second time when the first attempt lost its connection: a
   * read has no effect to duplicate, and the second attempt gets a new connection.
   */
  async read<R extends pg.QueryResultRow = pg.QueryResultRow>(
    action: string,
    text: string,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>> {
    this.assertOpen();
    try {
      const result = await this.pool.query<R>(text, values);
      this.succeeded();
      return result;
    } catch (error) {
      if (!isDroppedConnection(error) || this.closed) throw this.fail(error, action);
      try {
        const result = await this.pool.query<R>(text, values);
        this.succeeded();
        return result;
      } catch (again) {
        throw this.fail(again, action);
      }
    }
  }

  /** Runs `body` in one transaction on one connection; any error rolls it back. */
  async transaction<T>(action: string, body: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    this.assertOpen();
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (error) {
      throw this.fail(error, action);
    }
    let broken: Error | undefined;
    try {
      await client.query("BEGIN");
      const result = await body(client);
      await client.query("COMMIT");
      this.succeeded();
      return result;
    } catch (error) {
      if (connectionFault(error) !== undefined) broken = error as Error;
      else
        await client.query("ROLLBACK").catch((rollbackError: Error) => {
          broken = rollbackError;
        });
      throw this.fail(error, action);
    } finally {
      // A connection that failed is destroyed, not handed to the next caller.
      client.release(broken);
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.pool.end();
  }
}

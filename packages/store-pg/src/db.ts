import { createHash } from "node:crypto";
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
/** Distinct statement texts prepared per connection, at most (texts seen once are never prepared). */
const PREPARED_TEXTS = 2000;

export class Db {
  private closed = false;
  private fault: Fault | undefined;
  /** Statement text → its prepared statement's name once seen twice (`true`: seen once). */
  private readonly prepared = new Map<string, string | true>();

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

  /**
   * A statement the server parses and plans once per connection and then only binds and executes:
   * the store's statements are a fixed set of texts run over and over, and parsing and planning them
   * each time was about a third of the server's CPU per `sessions_send`. A text seen for the first
   * time runs unnamed (one-off texts, e.g. a list query with an unusual filter, are not kept), and
   * at most PREPARED_TEXTS texts are ever named.
   */
  private statement(text: string, values: unknown[] | undefined): pg.QueryConfig {
    const known = this.prepared.get(text);
    if (typeof known === "string") return { name: known, text, values: values ?? [] };
    if (known === undefined) {
      if (this.prepared.size < PREPARED_TEXTS) this.prepared.set(text, true);
      return { text, values: values ?? [] };
    }
    const name = `sb_${createHash("sha256").update(text).digest("hex").slice(0, 32)}`;
    this.prepared.set(text, name);
    return { name, text, values: values ?? [] };
  }

  /** One statement (its own transaction). Not retried: a write may have committed before the failure. */
  async query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    action: string,
    text: string,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>> {
    this.assertOpen();
    try {
      const result = await this.pool.query<R>(this.statement(text, values));
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
    const statement = this.statement(text, values);
    try {
      const result = await this.pool.query<R>(statement);
      this.succeeded();
      return result;
    } catch (error) {
      if (!isDroppedConnection(error) || this.closed) throw this.fail(error, action);
      try {
        const result = await this.pool.query<R>(statement);
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
      const result = await body(this.preparing(client));
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

  /** The transaction's connection, its `query(text, values)` run as prepared statements too. */
  private preparing(client: pg.PoolClient): pg.PoolClient {
    const query = (text: unknown, values?: unknown) =>
      typeof text === "string" && (values === undefined || Array.isArray(values))
        ? client.query(this.statement(text, values))
        : (client.query as (...args: unknown[]) => unknown)(text, values);
    return new Proxy(client, {
      get(target, property) {
        if (property === "query") return query;
        const value = Reflect.get(target, property, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.pool.end();
  }
}

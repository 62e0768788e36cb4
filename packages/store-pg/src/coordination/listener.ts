import type { Logger } from "@switchboard/core";
import type pg from "pg";

/** What a component listening on one channel is told. */
export interface ChannelHandlers {
  /** A notification on the channel (its payload; empty when it had none). */
  notify(payload: string): void;
  /**
   * The channel is listened to: the first time, and again after a lost connection was re-opened.
   * Notifications sent while no one listened are lost, so this is where a component catches up.
   */
  connected?(): void;
}

/**
 * The LISTEN side of one gateway instance: every channel on one dedicated connection.
 *
 * PostgreSQL signals every listening connection of the database on each NOTIFY, whatever its
 * channels, and each such connection is a server process: one per instance instead of one per
 * component (events, run wake-ups) halves both. A lost connection is re-opened after a short delay,
 * every channel is listened to again, and each component is told (`connected`) so that it reads
 * what it missed. The connection is ended while no channel is listened to.
 */
export interface ChannelListener {
  /**
   * Listens on `channel` until the returned function is called. Resolves once the channel is
   * listened to, or once the first attempt failed (the listener then keeps trying every
   * `reconnectMs`, default 250, and calls `connected` when it succeeds). One component a channel.
   */
  listen(
    channel: string,
    handlers: ChannelHandlers,
    options?: { reconnectMs?: number },
  ): Promise<() => Promise<void>>;
  /** True while `channel` is listened to on a live connection. */
  listening(channel: string): boolean;
  /** The channels components asked for (listened to or being re-opened). */
  channels(): string[];
  /**
   * Since when (epoch ms) a channel asked for has not been listened to — the connection lost or
   * not opened yet —, undefined while every one is.
   */
  downSince(): number | undefined;
  close(): Promise<void>;
}

const DEFAULT_RECONNECT_MS = 250;

const quote = (channel: string) => `"${channel.replaceAll('"', '""')}"`;

/** `connect` opens a dedicated connection (the caller's settings and error rules). */
export function openChannelListener(connect: () => Promise<pg.Client>, logger: Logger): ChannelListener {
  const registered = new Map<string, { handlers: ChannelHandlers; reconnectMs: number }>();
  /** The live connection, and the channels LISTENed on it. */
  let client: pg.Client | undefined;
  const active = new Set<string>();
  let opening: Promise<void> | undefined;
  let syncing: Promise<void> = Promise.resolve();
  let reconnectTimer: NodeJS.Timeout | undefined;
  let closed = false;
  let down: number | undefined;
  /** Notes whether every channel asked for is listened to now (`downSince`). */
  const noteState = () => {
    const listening =
      registered.size === 0 ||
      (client !== undefined && [...registered.keys()].every((channel) => active.has(channel)));
    if (listening) down = undefined;
    else down ??= Date.now();
  };

  const scheduleReconnect = () => {
    if (closed || reconnectTimer || registered.size === 0) return;
    const delay = Math.min(...[...registered.values()].map((entry) => entry.reconnectMs));
    reconnectTimer = setTimeout(() => {
      reconnectTimer = undefined;
      void open();
    }, delay);
    reconnectTimer.unref();
  };

  const drop = (on: pg.Client) => {
    if (client !== on) return;
    client = undefined;
    active.clear();
    noteState();
    void on.end().catch(() => undefined);
  };

  /** Brings the connection's channels in line with the registered ones (one at a time). */
  const sync = (): Promise<void> => {
    syncing = syncing.then(async () => {
      const on = client;
      if (!on) return;
      if (registered.size === 0) {
        // Nobody listens: the server process is given back.
        drop(on);
        return;
      }
      const added = [...registered.keys()].filter((channel) => !active.has(channel));
      const removed = [...active].filter((channel) => !registered.has(channel));
      if (added.length + removed.length === 0) return;
      try {
        await on.query(
          [
            ...added.map((channel) => `LISTEN ${quote(channel)}`),
            ...removed.map((channel) => `UNLISTEN ${quote(channel)}`),
          ].join("; "),
        );
      } catch (error) {
        if (client !== on) return;
        logger.warn({ err: error }, "listener connection failed; reconnecting");
        drop(on);
        scheduleReconnect();
        return;
      }
      if (client !== on) return;
      for (const channel of removed) active.delete(channel);
      for (const channel of added) active.add(channel);
      noteState();
      for (const channel of added) {
        if (!registered.has(channel)) continue;
        try {
          registered.get(channel)!.handlers.connected?.();
        } catch (error) {
          logger.error({ err: error, channel }, "a listener's catch-up failed");
        }
      }
    });
    return syncing;
  };

  const open = (): Promise<void> => {
    // Connected meanwhile (a listen that came before the reconnect's timer).
    if (client) return sync();
    opening ??= (async () => {
      let next: pg.Client;
      try {
        next = await connect();
      } catch (error) {
        logger.warn({ err: error }, "could not open the listener connection; retrying");
        noteState();
        scheduleReconnect();
        return;
      }
      if (closed || registered.size === 0) {
        await next.end().catch(() => undefined);
        return;
      }
      const lost = () => {
        if (client !== next) return;
        client = undefined;
        active.clear();
        noteState();
        logger.warn({ channels: [...registered.keys()] }, "listener connection lost; reconnecting");
        scheduleReconnect();
      };
      next.on("error", lost);
      next.on("end", lost);
      next.on("notification", (message) => {
        const entry = registered.get(message.channel);
        if (!entry) return;
        try {
          entry.handlers.notify(message.payload ?? "");
        } catch (error) {
          logger.error({ err: error, channel: message.channel }, "a listener's notification handler failed");
        }
      });
      client = next;
      await sync();
    })().finally(() => {
      opening = undefined;
    });
    return opening;
  };

  return {
    async listen(channel, handlers, options = {}) {
      if (closed) throw new Error("the listener is closed");
      if (registered.has(channel)) throw new Error(`channel ${channel} is listened to already`);
      const entry = { handlers, reconnectMs: options.reconnectMs ?? DEFAULT_RECONNECT_MS };
      registered.set(channel, entry);
      noteState();
      await (client ? sync() : open());
      return async () => {
        if (registered.get(channel) !== entry) return;
        registered.delete(channel);
        await sync();
      };
    },
    listening(channel) {
      return client !== undefined && active.has(channel) && registered.has(channel);
    },
    channels() {
      return [...registered.keys()];
    },
    downSince() {
      return down;
    },
    async close() {
      closed = true;
      clearTimeout(reconnectTimer);
      registered.clear();
      const on = client;
      client = undefined;
      active.clear();
      await on?.end().catch(() => undefined);
    },
  };
}

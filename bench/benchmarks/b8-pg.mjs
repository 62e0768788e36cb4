// B8: `sessions.list` limit 50 and `sessions_history` limit 50 on the PostgreSQL store with 1M
// sessions; baseline: the same SQL on a raw client (what `psql` would run), in the same run.
// Needs a PostgreSQL server (BENCH_PG_URL, else SWITCHBOARD_TEST_PG_URL, else the local default);
// without one it is skipped with a notice.
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { ROOT, setting } from "../lib/modules.mjs";
import { spawnGateway } from "../lib/processes.mjs";
import { figure, repeated } from "../lib/report.mjs";
import { median, now, timeEach } from "../lib/stats.mjs";
import { Peer } from "../lib/ws-peer.mjs";

export const definition = {
  id: "B8",
  title: "postgres store: sessions.list limit 50 and sessions_history limit 50 at 1M sessions",
  target: "median <= 10 ms each; baseline: the same query on a raw client (psql-equivalent)",
};

const LIMIT = 50;
const TARGET_MS = 10;
const HISTORY_MAX_BYTES = 65_536;
/** Bump when the generated data changes shape: the data set is then rebuilt. */
const GENERATOR_VERSION = 3;
const SCHEMA = "switchboard_bench_b8";
const DAY = 86_400_000;
// Session ids are md5-derived for repeatability, with the version and variant digits of a v4 UUID
// (core only accepts RFC 4122 UUIDs).

/** Sizes per scale: the target is at 1M sessions (default and full); `small` is for development. */
const SIZES = {
  small: { sessions: 100_000, transcripts: 100, entriesPer: 1_000 },
  default: { sessions: 1_000_000, transcripts: 1_000, entriesPer: 1_000 },
  full: { sessions: 1_000_000, transcripts: 10_000, entriesPer: 1_000 },
};

const pgUrl = () =>
  setting("BENCH_PG_URL") || setting("SWITCHBOARD_TEST_PG_URL") || "postgres://postgres@127.0.0.1:5432/test";

const storePgRequire = createRequire(`${ROOT}packages/store-pg/package.json`);

async function loadStorePg() {
  const dist = `${ROOT}packages/store-pg/dist/index.js`;
  if (!existsSync(dist)) throw new Error(`@switchboard/store-pg is not built (${dist} is missing)`);
  return import(pathToFileURL(dist).href);
}

function sizesFor(params) {
  const base = SIZES[params.scale] ?? SIZES.default;
  const number = (name, fallback) => {
    const raw = setting(name);
    return raw ? Number(raw) : fallback;
  };
  return {
    sessions: number("BENCH_B8_SESSIONS", base.sessions),
    transcripts: number("BENCH_B8_TRANSCRIPTS", base.transcripts),
    entriesPer: number("BENCH_B8_ENTRIES_PER", base.entriesPer),
  };
}

/**
 * Builds the data set in SQL (generate_series), shaped exactly as the store writes it: the row JSON
 * and the columns derived from it. Sessions are a mix of direct chats, groups, sub-agents and cron
 * jobs of agents main, research and ops, `updatedAt` spread over 30 days. Transcripts hold ~400-byte
 * user/assistant messages, with a tool result every 10th entry.
 */
async function generate(client, sizes, log) {
  const s = `"${SCHEMA}"`;
  const started = now();
  // Bulk load: the search index is built again when the store opens, and the search side table is
  // filled in one statement instead of by a row trigger a million times.
  await client.query(`DROP INDEX IF EXISTS ${s}.session_search_trgm`);
  await client.query(`ALTER TABLE ${s}.sessions DISABLE TRIGGER sessions_search_inserted`);
  await client.query("SET maintenance_work_mem = '256MB'");
  log(`generating ${sizes.sessions.toLocaleString("en-US")} sessions`);
  const nowMs = Date.now();
  await client.query(
    `INSERT INTO ${s}.sessions (key, session_id, agent_id, updated_at, taint_rank, spawned_by, label, archived_at,
       rest, kind_base, key_lc, name_lc, label_lc, version, row)
     SELECT k.key, k.sid, k.agent, k.updated, 0, k.spawned, NULL, NULL, k.rest, k.kind, lower(k.key), NULL, NULL,
       nextval('${SCHEMA}.row_versions'),
       json_strip_nulls(json_build_object('key', k.key, 'sessionId', k.sid, 'agentId', k.agent,
         'createdAt', k.updated - 60000, 'updatedAt', k.updated, 'taint', 'PUBLIC', 'clearance', 'INTERNAL',
         'spawnedBy', k.spawned, 'spawnDepth', CASE WHEN k.spawned IS NULL THEN NULL ELSE 1 END))
     FROM (
       SELECT r.*, 'agent:' || r.agent || ':' || r.rest AS key FROM (
         SELECT i, overlay(overlay(md5('b8-' || i) placing '4' from 13) placing '8' from 17)::uuid AS sid,
           (ARRAY['main', 'research', 'ops'])[i % 3 + 1] AS agent,
           $1::bigint - (i::bigint * 7919) % $2::bigint AS updated,
           CASE i % 20 WHEN 0 THEN 'cron:job-' || i WHEN 1 THEN 'subagent:' || md5('c' || i)
             WHEN 2 THEN 'discord:group:g' || i WHEN 3 THEN 'slack:channel:c' || i ELSE 'telegram:dm:u' || i END AS rest,
           CASE i % 20 WHEN 0 THEN 'cron' WHEN 1 THEN 'subagent' WHEN 2 THEN 'group' WHEN 3 THEN 'group' ELSE 'other' END AS kind,
           CASE WHEN i % 20 = 1 THEN 'agent:' || (ARRAY['main', 'research', 'ops'])[i % 3 + 1] || ':main' END AS spawned
         FROM generate_series(1, $3::int) AS i
       ) r
     ) k`,
    [nowMs, 30 * DAY, sizes.sessions],
  );
  await client.query(
    `INSERT INTO ${s}.session_search (key, key_lc, name_lc, label_lc) SELECT key, key_lc, name_lc, label_lc FROM ${s}.sessions`,
  );
  await client.query(`ALTER TABLE ${s}.sessions ENABLE TRIGGER sessions_search_inserted`);
  log(`generating ${sizes.transcripts} transcripts of ${sizes.entriesPer} entries`);
  await client.query(
    `INSERT INTO ${s}.transcripts (session_id, key, created_at, last_seq)
     SELECT overlay(overlay(md5('b8-' || i) placing '4' from 13) placing '8' from 17)::uuid, 'agent:' || (ARRAY['main', 'research', 'ops'])[i % 3 + 1] || ':telegram:dm:u' || i,
       $1::bigint, $2::bigint
     FROM generate_series(1, $3::int) AS i WHERE i % 20 >= 4`,
    [nowMs - 30 * DAY, sizes.entriesPer, sizes.transcripts * 2],
  );
  const filler = "lorem ipsum dolor sit amet, consectetur adipiscing elit. ".repeat(6);
  await client.query(
    `INSERT INTO ${s}.transcript_entries (transcript_id, seq, bytes, entry)
     SELECT t.id, e.seq, octet_length(e.entry::text), e.entry
     FROM (SELECT id FROM ${s}.transcripts ORDER BY id LIMIT $1) t,
     LATERAL (
       SELECT n AS seq, json_build_object('type', 'message', 'id', md5(t.id || ':' || n), 'ts', $2::bigint + n * 1000,
         'label', 'INTERNAL', 'message', json_build_object(
           'role', CASE WHEN n % 10 = 0 THEN 'toolResult' WHEN n % 2 = 0 THEN 'assistant' ELSE 'user' END,
           'content', json_build_array(json_build_object('type', 'text', 'text', 'message ' || n || ': ' || $3::text)))) AS entry
       FROM generate_series(1, $4::int) AS n
     ) e`,
    [sizes.transcripts, nowMs - 30 * DAY, filler, sizes.entriesPer],
  );
  await client.query(
    `DELETE FROM ${s}.transcripts WHERE id NOT IN (SELECT DISTINCT transcript_id FROM ${s}.transcript_entries)`,
  );
  log("vacuum analyze");
  await client.query(`VACUUM (ANALYZE) ${s}.sessions`);
  await client.query(`VACUUM (ANALYZE) ${s}.session_search`);
  await client.query(`VACUUM (ANALYZE) ${s}.transcripts`);
  await client.query(`VACUUM (ANALYZE) ${s}.transcript_entries`);
  const manifest = { generator: GENERATOR_VERSION, ...sizes, generatedAt: nowMs };
  await client.query(
    `INSERT INTO ${s}.meta (name, value) VALUES ('bench.manifest', $1) ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value`,
    [JSON.stringify(JSON.stringify(manifest))],
  );
  log(`generated in ${((now() - started) / 1000).toFixed(1)} s`);
  return manifest;
}

async function manifestOf(client) {
  try {
    const found = await client.query(`SELECT value FROM "${SCHEMA}".meta WHERE name = 'bench.manifest'`);
    return found.rows[0] ? JSON.parse(found.rows[0].value) : undefined;
  } catch {
    return undefined;
  }
}

export async function run(params) {
  const url = pgUrl();
  const pg = storePgRequire("pg");
  const raw = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  raw.on("error", () => undefined);
  try {
    await raw.connect();
  } catch (error) {
    const notice = `skipped: no PostgreSQL at ${url.replace(/:[^:@/]*@/, ":***@")} (${error.message}); set BENCH_PG_URL to run B8`;
    console.log(`    ${notice}`);
    return { figures: [], skipped: notice };
  }
  const { openPostgresStore } = await loadStorePg();
  const sizes = sizesFor(params);
  const log = (message) => process.stderr.write(`[B8] ${message}\n`);
  let store;
  try {
    let manifest = await manifestOf(raw);
    const fresh =
      manifest?.generator === GENERATOR_VERSION &&
      manifest.sessions === sizes.sessions &&
      manifest.transcripts === sizes.transcripts &&
      manifest.entriesPer === sizes.entriesPer;
    if (!fresh) {
      await raw.query(`DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE`);
      await (await openPostgresStore({ url, schema: SCHEMA })).close();
      manifest = await generate(raw, sizes, log);
    }
    // Opening again builds the search index the generator dropped (it needs pg_trgm).
    store = await openPostgresStore({ url, schema: SCHEMA, pool: { max: 4 } });
    const transcriptIds = (
      await raw.query(`SELECT session_id FROM "${SCHEMA}".transcripts WHERE archived_at IS NULL ORDER BY id`)
    ).rows.map((row) => row.session_id);
    const counted = await store.sessions.count();
    if (counted !== sizes.sessions) throw new Error(`expected ${sizes.sessions} sessions, found ${counted}`);

    const perRep = Math.max(50, Math.ceil(params.b2Lists / params.reps));
    const measure = (fn) =>
      repeated(params.reps, async () => median(await timeEach(fn, { count: perRep, warmup: 10 })));
    const figures = [];
    const activeSince = manifest.generatedAt - DAY;
    const s = `"${SCHEMA}"`;

    // sessions.list: through the store, and the same SQL on a raw client.
    const lists = [
      {
        name: "limit 50",
        query: { limit: LIMIT },
        sql: `SELECT row FROM ${s}.sessions WHERE archived_at IS NULL ORDER BY updated_at DESC, key LIMIT $1`,
        values: [LIMIT],
        target: true,
      },
      {
        name: "limit 50, activeMinutes 1440",
        query: { limit: LIMIT, activeSince },
        sql: `SELECT row FROM ${s}.sessions WHERE archived_at IS NULL AND updated_at >= $1 ORDER BY updated_at DESC, key LIMIT $2`,
        values: [activeSince, LIMIT],
        target: true,
      },
      { name: "limit 50, agentId research", query: { limit: LIMIT, agentId: "research" } },
      { name: "limit 50, kinds [cron]", query: { limit: LIMIT, kinds: ["cron"] } },
      { name: "limit 50, spawnedBy agent:ops:main", query: { limit: LIMIT, spawnedBy: "agent:ops:main" } },
      { name: "limit 50, search matching 1 row", query: { limit: LIMIT, search: "dm:u123457" }, few: true },
      {
        name: "limit 50, agent visibility (the sessions_list tool)",
        query: { limit: LIMIT },
        options: {
          visibility: {
            selfKey: "agent:main:main",
            maxTaint: "INTERNAL",
            agents: ["main"],
            sandboxed: false,
          },
        },
      },
      {
        // A page that is not full: `hidden` then counts every matching row (the contract), a scan.
        name: "limit 50, sandboxed caller without children (hidden counts every row)",
        query: { limit: LIMIT },
        options: {
          visibility: { selfKey: "agent:ops:lonely", maxTaint: "INTERNAL", agents: "all", sandboxed: true },
        },
        few: true,
      },
    ];
    for (const list of lists) {
      const call = () => store.sessions.list(list.query, list.options);
      const check = await call();
      if (!list.few && check.entries.length !== LIMIT)
        throw new Error(`sessions.list (${list.name}) returned ${check.entries.length} rows`);
      const baseline = list.sql ? await measure(() => raw.query(list.sql, list.values)) : undefined;
      const result = await measure(call);
      figures.push(
        figure({
          label: `store sessions.list ${list.name}, ${sizes.sessions.toLocaleString("en-US")} sessions`,
          value: result.value,
          reps: result.reps,
          unit: "ms",
          ...(baseline ? { baseline: baseline.value, baselineLabel: "same SQL, raw client" } : {}),
          ...(list.target ? { target: { op: "<=", value: TARGET_MS } } : {}),
        }),
      );
    }

    // sessions_history: the tool's read (limit 50, messages without tool results, 64 KiB cap) on
    // transcripts taken in turn, and the plain tail read; baseline: the tail query on a raw client.
    const messagesOnly = (entry) => entry.type === "message" && entry.message?.role !== "toolResult";
    const idAt = (i) => transcriptIds[i % transcriptIds.length];
    const internalIds = (
      await raw.query(`SELECT id FROM ${s}.transcripts WHERE archived_at IS NULL ORDER BY id`)
    ).rows.map((row) => row.id);
    const tailSql = `SELECT seq, bytes, entry FROM ${s}.transcript_entries WHERE transcript_id = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3`;
    const baseline = await measure((i) =>
      raw.query(tailSql, [internalIds[i % internalIds.length], Number.MAX_SAFE_INTEGER, LIMIT]),
    );
    const entriesTotal = sizes.transcripts * sizes.entriesPer;
    const reads = [
      {
        name: "sessions_history read (limit 50, messages only, 64 KiB cap)",
        options: { limit: LIMIT, maxBytes: HISTORY_MAX_BYTES, filter: messagesOnly },
        target: true,
      },
      { name: "tail read limit 50", options: { limit: LIMIT }, target: true },
      { name: "tail read limit 50, 64 KiB cap", options: { limit: LIMIT, maxBytes: HISTORY_MAX_BYTES } },
      { name: "page back: limit 50 before seq 500", options: { limit: LIMIT, before: 500 } },
    ];
    for (const read of reads) {
      const first = await store.transcripts.read(idAt(0), read.options);
      if (first.entries.length === 0) throw new Error(`transcript read (${read.name}) returned nothing`);
      const result = await measure((i) => store.transcripts.read(idAt(i), read.options));
      figures.push(
        figure({
          label: `store ${read.name}, ${entriesTotal.toLocaleString("en-US")} transcript rows`,
          value: result.value,
          reps: result.reps,
          unit: "ms",
          baseline: baseline.value,
          baselineLabel: "tail SQL, raw client",
          ...(read.target ? { target: { op: "<=", value: TARGET_MS } } : {}),
          note: `${first.entries.length} entries returned`,
        }),
      );
    }

    // The same two calls through a gateway on this store (WebSocket round trip included): the
    // operator's sessions.list and sessions.history (messages without tool results, 64 KiB cap).
    const searchIndex = store.migration.searchIndex;
    await store.close();
    store = undefined;
    const dataDir = mkdtempSync(join(tmpdir(), "switchboard-b8-"));
    const gateway = await spawnGateway({
      dataDir,
      config: { store: { kind: "postgres", url, schema: SCHEMA, pool: { max: 4 } } },
    });
    try {
      const peer = await Peer.connect(gateway.url, { token: gateway.token });
      const keys = (
        await raw.query(`SELECT key FROM ${s}.transcripts WHERE archived_at IS NULL ORDER BY id`)
      ).rows.map((row) => row.key);
      const calls = [
        {
          name: "sessions.list limit 50",
          call: () => peer.call("sessions.list", { limit: LIMIT }),
          check: (result) => result.sessions?.length === LIMIT,
        },
        {
          name: "sessions.history limit 50",
          call: (i) => peer.call("sessions.history", { sessionKey: keys[i % keys.length], limit: LIMIT }),
          check: (result) => result.messages?.length > 0,
        },
      ];
      for (const { name, call, check } of calls) {
        const first = now();
        const sample = await call(0);
        const firstMs = now() - first;
        if (!check(sample)) throw new Error(`gateway ${name}: ${JSON.stringify(sample).slice(0, 200)}`);
        const result = await measure(call);
        figures.push(
          figure({
            label: `gateway ${name} (WS), ${sizes.sessions.toLocaleString("en-US")} sessions`,
            value: result.value,
            reps: result.reps,
            unit: "ms",
            target: { op: "<=", value: TARGET_MS },
            note: `first call ${firstMs.toFixed(2)} ms`,
          }),
        );
      }
      peer.close();
    } finally {
      await gateway.close();
      rmSync(dataDir, { recursive: true, force: true });
    }

    return {
      figures,
      pass: figures.every((item) => item.pass !== false),
      sizes: { ...sizes, entries: entriesTotal, perRep, searchIndex },
      notes: [
        `data set in schema ${SCHEMA} (kept between runs; regenerated when its sizes or generator change)`,
        "the baseline is the store's own SQL run on a raw pg client: the ratio is the store's overhead (validation, JSON, a second lookup for transcripts)",
      ],
    };
  } finally {
    await store?.close();
    await raw.end().catch(() => undefined);
  }
}

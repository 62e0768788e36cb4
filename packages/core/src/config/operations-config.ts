import { z } from "zod";
import { intAtLeast, intRange, requiredOr } from "./schema-helpers";

const booleanField = () => z.boolean({ error: "must be true or false" });

/** A PostgreSQL connection URL (config, the store and the cluster coordination share the rule). */
export const PostgresUrlSchema = z
  .string({ error: "must be a postgres:// URL" })
  .regex(/^postgres(ql)?:\/\//, { error: "must start with postgres:// or postgresql://" });

/** A schema name Switchboard creates and quotes: lower-case, so it needs no case folding rules. */
export const PostgresSchemaNameSchema = z
  .string({ error: "must be a schema name" })
  .regex(/^[a-z_][a-z0-9_]{0,62}$/, {
    error: "must be a schema name: lower-case letters, digits and _, at most 63 characters",
  });

/**
 * Where durable state lives. `fs` (the default) is the data dir; `postgres` is one database shared by
 * every gateway instance of a cluster (scale-out.md). `url` and `urlEnv` are exclusive: the URL may hold
 * a password, so a deployment usually names an environment variable instead.
 */
export const StoreConfigSchema = z.discriminatedUnion(
  "kind",
  [
    z.strictObject({ kind: z.literal("fs") }),
    z
      .strictObject({
        kind: z.literal("postgres"),
        url: PostgresUrlSchema.optional(),
        urlEnv: z
          .string({ error: "must be an environment variable name" })
          .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, { error: "must be an environment variable name" })
          .optional(),
        schema: PostgresSchemaNameSchema.default("switchboard"),
        pool: z.strictObject({ max: intRange(1, 1000).default(10) }).prefault({}),
      })
      .superRefine((store, ctx) => {
        if (store.url !== undefined && store.urlEnv !== undefined)
          ctx.addIssue({ code: "custom", path: ["urlEnv"], message: "give either url or urlEnv, not both" });
        if (store.url === undefined && store.urlEnv === undefined)
          ctx.addIssue({ code: "custom", path: ["url"], message: "required: url or urlEnv" });
      }),
  ],
  { error: requiredOr('kind must be "fs" or "postgres"') },
);
export type StoreConfig = z.infer<typeof StoreConfigSchema>;

/** The web control UI at `/ui/` (web-ui.md). */
export const UiConfigSchema = z.strictObject({ enabled: booleanField().default(true) });

/** Metrics (`/metrics`) and OpenTelemetry traces (operations.md). Traces are off unless configured. */
export const TelemetryConfigSchema = z.strictObject({
  metrics: z
    .strictObject({
      enabled: booleanField().default(true),
      /** Serve `/metrics` without the operator token. */
      public: booleanField().default(false),
    })
    .prefault({}),
  traces: z
    .strictObject({
      exporter: z.enum(["otlp"], { error: 'must be "otlp"' }),
      /** OTLP/HTTP endpoint; absent: the standard OTEL_EXPORTER_OTLP_* environment variables. */
      endpoint: z
        .string({ error: "must be a URL" })
        .regex(/^https?:\/\//, { error: "must be an http:// or https:// URL" })
        .optional(),
    })
    .optional(),
});

/** How long ended runs and archived transcripts are kept (operations.md); the audit log is never pruned. */
export const RetentionConfigSchema = z.strictObject({
  runsDays: intRange(1, 36_500).default(7),
  /** null keeps archived transcripts for ever. */
  archiveDays: intAtLeast(1).nullable().default(30),
  /**
   * Ended runs kept at most: past it the oldest go first, whatever their age (never one ended in the
   * last minute, nor a spawn's, nor one whose announce or follow-up is pending). Absent: 200 000 on the
   * file store, which holds every run record in memory, and no cap on PostgreSQL; null: no cap.
   */
  maxEndedRuns: intAtLeast(1_000).nullable().optional(),
});

/** `maxEndedRuns` when the config leaves it out, by store kind (see `RetentionConfigSchema`). */
export const DEFAULT_MAX_ENDED_RUNS_FS = 200_000;

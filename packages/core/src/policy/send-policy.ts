import { z } from "zod";
import {
  type ChatType,
  ChatTypeSchema,
  chatTypeFromKey,
  deriveChannel,
  recipientChain,
  UNKNOWN_CHAT_TYPE,
} from "../keys/classify";
import { keyRest } from "../keys/parse-key";

export const SendPolicyActionSchema = z.enum(["allow", "deny"], { error: () => "must be allow or deny" });
export type SendPolicyAction = z.infer<typeof SendPolicyActionSchema>;

// Matching trims and ignores case: a blank value would read as "field absent" and match every send.
const MatchValueSchema = z.string().refine((value) => value.trim().length > 0, "must not be empty or blank");

export const SendPolicyRuleSchema = z.strictObject({
  action: SendPolicyActionSchema,
  /** Every field given must match; a rule without `match` matches every send. */
  match: z
    .strictObject({
      channel: MatchValueSchema.optional(),
      chatType: ChatTypeSchema.optional(),
      keyPrefix: MatchValueSchema.optional(),
      to: MatchValueSchema.optional(),
    })
    .optional(),
});
export type SendPolicyRule = z.infer<typeof SendPolicyRuleSchema>;

/** `session.sendPolicy`. */
export const SendPolicySchema = z.strictObject({
  default: SendPolicyActionSchema.optional(),
  rules: z.array(SendPolicyRuleSchema).optional(),
});
export type SendPolicyConfig = z.infer<typeof SendPolicySchema>;

/** The exact message of a send denied by the send policy. */
export const SEND_BLOCKED_MESSAGE = "send blocked by session policy";

export interface SendTarget {
  /** Channel of the session (or of the recipient on output); derived from `key` when absent. */
  channel?: string;
  /**
   * Derived from the key's shape when absent. `unknown` (a destination the gateway cannot classify):
   * a `deny` rule naming a chat type matches it and an `allow` rule does not, so not knowing never
   * lets a send past a rule meant to stop it.
   */
  chatType?: ChatType | typeof UNKNOWN_CHAT_TYPE;
  /** Canonical key of the session sent into (or whose reply goes out). */
  key?: string;
  /** Recipient id, matched by `match.to`. */
  to?: string;
  /** The session's own `sendPolicy`; wins over everything. */
  override?: SendPolicyAction;
}

export interface SendPolicyResolution {
  action: SendPolicyAction;
  /** Why: the session override, a matching rule (`matchedRule` is its index), the default, or no policy. */
  reason: "override" | "rule" | "default" | "no-policy";
  matchedRule?: number;
}

const normalize = (value: string | undefined): string | undefined => value?.trim().toLowerCase() || undefined;

/**
 * OpenClaw-compatible resolution: the session override wins; no policy → allow; the first matching
 * `deny` rule → deny; otherwise any matching `allow` → allow; otherwise the policy's `default`
 * (allow). Matching is case-insensitive. `keyPrefix` is tried against the key's `<rest>` and against
 * the full canonical key, so `cron:` and `agent:main:cron:` both work.
 */
export function resolveSendPolicy(
  policy: SendPolicyConfig | undefined,
  target: SendTarget,
): SendPolicyResolution {
  if (target.override) return { action: target.override, reason: "override" };
  if (!policy) return { action: "allow", reason: "no-policy" };
  const key = normalize(target.key) ?? "";
  const rest = keyRest(key);
  const channel = normalize(target.channel) ?? (key ? deriveChannel(key) : undefined);
  const chatType = target.chatType ?? (key ? chatTypeFromKey(key) : undefined);
  // A rule on a chat holds in its threads: `to: "announcements"` also matches `announcements:thread:7`.
  const to = normalize(target.to);
  const recipients = to === undefined ? [] : recipientChain(to);
  let firstAllow: number | undefined;
  const rules = policy.rules ?? [];
  for (let index = 0; index < rules.length; index++) {
    const rule = rules[index];
    if (!rule) continue;
    const match = rule.match ?? {};
    // A blank value (the schema refuses it; rules may come from elsewhere) matches nothing, rather
    // than reading as an absent field that matches every send.
    if ([match.channel, match.keyPrefix, match.to].some((value) => value !== undefined && !normalize(value)))
      continue;
    const wantChannel = normalize(match.channel);
    if (wantChannel !== undefined && wantChannel !== channel) continue;
    if (
      match.chatType !== undefined &&
      match.chatType !== chatType &&
      !(chatType === UNKNOWN_CHAT_TYPE && rule.action === "deny")
    )
      continue;
    const prefix = normalize(match.keyPrefix);
    if (prefix !== undefined && !key.startsWith(prefix) && !rest.startsWith(prefix)) continue;
    const wantTo = normalize(match.to);
    if (wantTo !== undefined && !recipients.includes(wantTo)) continue;
    if (rule.action === "deny") return { action: "deny", reason: "rule", matchedRule: index };
    firstAllow ??= index;
  }
  if (firstAllow !== undefined) return { action: "allow", reason: "rule", matchedRule: firstAllow };
  return { action: policy.default ?? "allow", reason: "default" };
}

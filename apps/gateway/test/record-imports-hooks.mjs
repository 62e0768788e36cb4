// Module hooks (they run on the loader's own thread): each module's URL, once it is loaded.
import { appendFileSync } from "node:fs";

const log = process.env.SWITCHBOARD_TEST_IMPORTS_LOG;

export async function load(url, context, next) {
  const result = await next(url, context);
  if (log) appendFileSync(log, `${url}\n`);
  return result;
}

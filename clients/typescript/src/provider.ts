/**
 * The prepared request for the provider the caller writes for; `@strata/client/openai` and
 * `@strata/client/anthropic` type it as the official SDK's parameters.
 * @module
 */

import type { PreparedTurn, Provider } from "./types.js";

/**
 * The turn's request, after checking that the server wrote it for `provider` (`strata serve
 * --provider`); throws otherwise, since another provider's body would be refused or misread.
 */
export function requestFor(turn: PreparedTurn, provider: Provider): Record<string, unknown> {
  if (turn.provider !== provider) {
    throw new Error(
      `the turn was prepared for ${JSON.stringify(turn.provider)}, not ${JSON.stringify(provider)}; ` +
        `start \`strata serve\` with \`--provider ${provider}\`, or use the ${turn.provider} request`,
    );
  }
  return turn.request;
}

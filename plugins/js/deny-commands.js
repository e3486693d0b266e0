// deny-commands gate (JavaScript, plugin API 0.2): rejects a call whose `command` argument
// contains one of the configured `patterns` (comma-separated substrings), saying why: the
// deployment's `reason` when it sets one, else `the command contains "<pattern>", which this
// deployment does not allow`. A call without recorded arguments or a string `command` is not this
// gate's to judge: it says `next`. `patterns` and `reason` are its only config keys; any other is
// refused at load.
import { config, log } from 'approval:plugin/host@0.2.0';

const KEYS = ['patterns', 'reason'];

export function validateConfig(entries) {
  for (const [key] of entries) {
    if (!KEYS.includes(key)) {
      throw `unknown key "${key}": deny-commands reads only "patterns" and "reason"`;
    }
  }
}

function commandOf(request) {
  if (request.callId == null || request.arguments == null) return undefined;
  let value;
  try {
    value = JSON.parse(request.arguments);
  } catch {
    return undefined;
  }
  const command = value !== null && typeof value === 'object' ? value.command : undefined;
  return typeof command === 'string' ? command : undefined;
}

export function decide(request) {
  const command = commandOf(request);
  if (command === undefined) return { tag: 'next' };
  const patterns = (config('patterns') ?? '').split(',').map((p) => p.trim());
  const pattern = patterns.find((p) => p !== '' && command.includes(p));
  if (pattern === undefined) return { tag: 'next' };
  log('info', `command matches ${JSON.stringify(pattern)}: rejected`);
  const reason =
    config('reason') ?? `the command contains "${pattern}", which this deployment does not allow`;
  return { tag: 'reject', val: reason };
}

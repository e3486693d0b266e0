// deny-commands gate (JavaScript): rejects a call whose `command` argument contains one of the
// configured `patterns` (comma-separated substrings). A call without a call id, recorded
// arguments or a string `command` is not this gate's to judge: it says `next`.
import { callArguments, config, log } from 'approval:plugin/host@0.1.0';

function commandOf(request) {
  if (request.callId == null) return undefined;
  const text = callArguments(request.callId);
  if (text == null) return undefined;
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  const command = value !== null && typeof value === 'object' ? value.command : undefined;
  return typeof command === 'string' ? command : undefined;
}

export function decide(request) {
  const command = commandOf(request);
  if (command === undefined) return 'next';
  const patterns = (config('patterns') ?? '').split(',').map((p) => p.trim());
  const pattern = patterns.find((p) => p !== '' && command.includes(p));
  if (pattern === undefined) return 'next';
  log('info', `command matches ${JSON.stringify(pattern)}: rejected`);
  return 'reject';
}

// allow-tools gate (JavaScript, plugin API 0.2): grants one call of any tool listed in its
// `tools` config (comma-separated, e.g. `tools = "read,grep"`), and says `next` for everything
// else. `tools` is its only config key: any other is refused at load.
import { config } from 'approval:plugin/host@0.2.0';

const KEYS = ['tools'];

export function validateConfig(entries) {
  for (const [key] of entries) {
    if (!KEYS.includes(key)) throw `unknown key "${key}": allow-tools reads only "tools"`;
  }
}

export function decide(request) {
  const tools = config('tools') ?? '';
  const listed = tools
    .split(',')
    .map((t) => t.trim())
    .some((t) => t !== '' && t === request.toolName);
  return { tag: listed ? 'allow-once' : 'next' };
}

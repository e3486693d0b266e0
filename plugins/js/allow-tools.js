// allow-tools gate (JavaScript): grants one call of any tool listed in its `tools` config
// (comma-separated, e.g. `tools = "read,grep"`), and says `next` for everything else.
import { config } from 'approval:plugin/host@0.1.0';

export function decide(request) {
  const tools = config('tools') ?? '';
  const listed = tools
    .split(',')
    .map((t) => t.trim())
    .some((t) => t !== '' && t === request.toolName);
  return listed ? 'allow-once' : 'next';
}

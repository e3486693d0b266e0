// A misbehaving gate (JavaScript), for the conformance suite's adversarial cases. The tool name
// picks the misbehaviour: `throw` throws, `loop` never returns, `alloc` allocates without end;
// any other tool is granted, to show the plugin recovers.
export function decide(request) {
  switch (request.toolName) {
    case 'throw':
      throw new Error('the adversary throws');
    case 'loop':
      for (;;) {}
    case 'alloc': {
      const hoard = [];
      for (;;) hoard.push(new Uint8Array(1 << 20));
    }
    default:
      return 'allow-once';
  }
}

/* A misbehaving gate (C), for the conformance suite's adversarial cases. The tool name picks
 * the misbehaviour: `throw` aborts, `loop` never returns, `alloc` allocates without end; any
 * other tool is granted, to show the plugin recovers. */
#include <stdlib.h>
#include <string.h>

#include "answerer.h"

/* Where the hoard escapes to, so the optimizer cannot drop the allocations. */
char *volatile escaped;

static int is(answerer_string_t *s, const char *word) {
  return s->len == strlen(word) && memcmp(s->ptr, word, s->len) == 0;
}

answerer_decision_t exports_answerer_decide(answerer_request_t *request) {
  if (is(&request->tool_name, "throw")) abort();
  if (is(&request->tool_name, "loop")) {
    volatile int spin = 1;
    while (spin) {}
  }
  if (is(&request->tool_name, "alloc")) {
    for (;;) {
      char *hoard = malloc(1 << 20);
      if (!hoard) abort(); /* out of memory is a failure, never a grant */
      memset(hoard, 1, 1 << 20);
      escaped = hoard;
    }
  }
  answerer_request_free(request);
  return APPROVAL_PLUGIN_TYPES_DECISION_ALLOW_ONCE;
}

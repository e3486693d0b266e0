/* Finds the top-level "command" string of a JSON object, for deny_commands.c.
 *
 * A small validating recursive-descent reader: json_command() returns 1 and the decoded UTF-8
 * bytes of the last "command" member when the text is a JSON object whose "command" is a string,
 * and 0 for anything else (invalid JSON, another top-level type, no or a non-string "command"),
 * like the Rust, Python and JavaScript builds of the gate. */
#ifndef JSON_COMMAND_H
#define JSON_COMMAND_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const char *p, *end;
  int depth;
} json_reader;

typedef struct {
  char *data;
  size_t len, cap;
} json_buf;

static int json_push(json_buf *b, const char *s, size_t n) {
  if (!b) return 1;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->len + n) cap *= 2;
    char *data = realloc(b->data, cap);
    if (!data) return 0;
    b->data = data;
    b->cap = cap;
  }
  memcpy(b->data + b->len, s, n);
  b->len += n;
  return 1;
}

static void json_ws(json_reader *r) {
  while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')) r->p++;
}

static int json_hex4(json_reader *r, uint32_t *out) {
  if (r->end - r->p < 4) return 0;
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) {
    char c = *r->p++;
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
    else return 0;
  }
  *out = v;
  return 1;
}

static int json_utf8(json_buf *b, uint32_t c) {
  char s[4];
  size_t n;
  if (c < 0x80) { s[0] = (char)c; n = 1; }
  else if (c < 0x800) { s[0] = (char)(0xC0 | (c >> 6)); s[1] = (char)(0x80 | (c & 0x3F)); n = 2; }
  else if (c < 0x10000) {
    s[0] = (char)(0xE0 | (c >> 12)); s[1] = (char)(0x80 | ((c >> 6) & 0x3F));
    s[2] = (char)(0x80 | (c & 0x3F)); n = 3;
  } else {
    s[0] = (char)(0xF0 | (c >> 18)); s[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    s[2] = (char)(0x80 | ((c >> 6) & 0x3F)); s[3] = (char)(0x80 | (c & 0x3F)); n = 4;
  }
  return json_push(b, s, n);
}

/* Reads a string (the opening quote is next), decoding it into `out` when it is not NULL. */
static int json_string(json_reader *r, json_buf *out) {
  r->p++;
  while (r->p < r->end) {
    unsigned char c = (unsigned char)*r->p;
    if (c == '"') { r->p++; return 1; }
    if (c < 0x20) return 0;
    if (c != '\\') {
      if (!json_push(out, r->p, 1)) return 0;
      r->p++;
      continue;
    }
    if (++r->p >= r->end) return 0;
    char e = *r->p++;
    const char *simple = NULL;
    switch (e) {
      case '"': simple = "\""; break;
      case '\\': simple = "\\"; break;
      case '/': simple = "/"; break;
      case 'b': simple = "\b"; break;
      case 'f': simple = "\f"; break;
      case 'n': simple = "\n"; break;
      case 'r': simple = "\r"; break;
      case 't': simple = "\t"; break;
      case 'u': {
        uint32_t c1, c2;
        if (!json_hex4(r, &c1)) return 0;
        if (c1 >= 0xD800 && c1 <= 0xDBFF) {
          if (r->end - r->p < 2 || r->p[0] != '\\' || r->p[1] != 'u') return 0;
          r->p += 2;
          if (!json_hex4(r, &c2) || c2 < 0xDC00 || c2 > 0xDFFF) return 0;
          c1 = 0x10000 + ((c1 - 0xD800) << 10) + (c2 - 0xDC00);
        } else if (c1 >= 0xDC00 && c1 <= 0xDFFF) {
          return 0;
        }
        if (!json_utf8(out, c1)) return 0;
        continue;
      }
      default: return 0;
    }
    if (!json_push(out, simple, 1)) return 0;
  }
  return 0;
}

static int json_literal(json_reader *r, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0) return 0;
  r->p += n;
  return 1;
}

static int json_number(json_reader *r) {
  const char *start = r->p;
  if (r->p < r->end && *r->p == '-') r->p++;
  if (r->p >= r->end) return 0;
  if (*r->p == '0') r->p++;
  else if (*r->p >= '1' && *r->p <= '9') while (r->p < r->end && *r->p >= '0' && *r->p <= '9') r->p++;
  else return 0;
  if (r->p < r->end && *r->p == '.') {
    r->p++;
    if (r->p >= r->end || *r->p < '0' || *r->p > '9') return 0;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') r->p++;
  }
  if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
    r->p++;
    if (r->p < r->end && (*r->p == '+' || *r->p == '-')) r->p++;
    if (r->p >= r->end || *r->p < '0' || *r->p > '9') return 0;
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') r->p++;
  }
  return r->p > start;
}

static int json_value(json_reader *r);

static int json_container(json_reader *r, char close) {
  if (++r->depth > 128) return 0;
  r->p++;
  json_ws(r);
  if (r->p < r->end && *r->p == close) { r->p++; r->depth--; return 1; }
  for (;;) {
    json_ws(r);
    if (close == '}') {
      if (r->p >= r->end || *r->p != '"' || !json_string(r, NULL)) return 0;
      json_ws(r);
      if (r->p >= r->end || *r->p++ != ':') return 0;
      json_ws(r);
    }
    if (!json_value(r)) return 0;
    json_ws(r);
    if (r->p >= r->end) return 0;
    char c = *r->p++;
    if (c == close) { r->depth--; return 1; }
    if (c != ',') return 0;
  }
}

static int json_value(json_reader *r) {
  if (r->p >= r->end) return 0;
  switch (*r->p) {
    case '{': return json_container(r, '}');
    case '[': return json_container(r, ']');
    case '"': return json_string(r, NULL);
    case 't': return json_literal(r, "true");
    case 'f': return json_literal(r, "false");
    case 'n': return json_literal(r, "null");
    default: return json_number(r);
  }
}

/* 1 with the last top-level "command" string in `out` (the caller frees out->data), else 0. */
static int json_command(const char *text, size_t len, json_buf *out) {
  json_reader r = {text, text + len, 0};
  int found = 0;
  out->data = NULL;
  out->len = out->cap = 0;
  json_ws(&r);
  if (r.p >= r.end || *r.p != '{') return 0;
  r.p++;
  json_ws(&r);
  if (r.p < r.end && *r.p == '}') { r.p++; goto done; }
  for (;;) {
    json_buf key = {0};
    json_ws(&r);
    if (r.p >= r.end || *r.p != '"' || !json_string(&r, &key)) { free(key.data); goto fail; }
    int is_command = key.len == 7 && memcmp(key.data, "command", 7) == 0;
    free(key.data);
    json_ws(&r);
    if (r.p >= r.end || *r.p++ != ':') goto fail;
    json_ws(&r);
    if (is_command && r.p < r.end && *r.p == '"') {
      out->len = 0; /* the last "command" wins, as in the other builds */
      if (!json_string(&r, out)) goto fail;
      found = 1;
    } else {
      if (!json_value(&r)) goto fail;
      if (is_command) found = 0;
    }
    json_ws(&r);
    if (r.p >= r.end) goto fail;
    char c = *r.p++;
    if (c == '}') break;
    if (c != ',') goto fail;
  }
done:
  json_ws(&r);
  if (r.p != r.end) goto fail;
  return found;
fail:
  free(out->data);
  out->data = NULL;
  out->len = out->cap = 0;
  return 0;
}

#endif

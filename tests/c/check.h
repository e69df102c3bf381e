/* The check every C test makes: CHECK(cond, printf-style message) counts
 * the check and, when `cond` is false, the failure, and says where it was.
 * Each test program reports `failures` and `checks` at its end. */
#ifndef PACER_TEST_CHECK_H
#define PACER_TEST_CHECK_H

#include <stdio.h>

static int failures = 0;
static int checks = 0;

#define CHECK(cond, ...)                                              \
  do {                                                                \
    checks++;                                                         \
    if (!(cond)) {                                                    \
      failures++;                                                     \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                   \
      fputc('\n', stderr);                                            \
    }                                                                 \
  } while (0)

#endif

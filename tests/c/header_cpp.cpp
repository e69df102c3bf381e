// The header compiles as C++17 and its layout checks hold there too.
#include "pacer.h"

static_assert(sizeof(pacer) == PACER_STORAGE_SIZE, "size");
static_assert(PACER_STATUS_OK == 0, "ok is zero");

int main() {
  pacer p;
  pacer_config c{60, 10, 120000, 5, PACER_RELEASE_POLICY_REFUND, 0, 0};
  pacer_decision d{};
  if (pacer_init(&p, &c, 0) != PACER_STATUS_OK) return 1;
  if (pacer_reserve(&p, 0, &d) != PACER_STATUS_OK) return 1;
  return d.kind == PACER_DECISION_KIND_ADMITTED ? 0 : 1;
}

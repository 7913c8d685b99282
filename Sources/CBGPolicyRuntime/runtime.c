#include "bgpolicy_runtime.h"

// Declared by the Swift runtime (libswift_Concurrency) as a function pointer; only its
// address is taken here, so its exact type does not matter to C.
extern void *swift_task_enqueueGlobal_hook;

void **bgpolicy_swift_task_enqueueGlobal_hook_address(void) {
    return &swift_task_enqueueGlobal_hook;
}

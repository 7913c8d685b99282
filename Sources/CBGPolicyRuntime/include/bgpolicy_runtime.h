#ifndef BGPOLICY_RUNTIME_H
#define BGPOLICY_RUNTIME_H
// The address of Swift concurrency's global-executor hook, resolved at link time.
// dlsym cannot find it when the Swift runtime is linked statically (it is not in the
// dynamic symbol table then); a reference from C code always links.
void **bgpolicy_swift_task_enqueueGlobal_hook_address(void);
#endif

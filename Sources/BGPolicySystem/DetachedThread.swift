internal import CBGPolicyThread
import Glibc

/// A detached thread of our own for a blocking loop (`WallClockWatch`'s `read`,
/// `SocketPathWatch`'s `poll`): `body` runs on it once and is released when it returns.
/// (`UdevPowerSupplyMonitor` starts its own: it must let go of the monitor before it announces
/// the end, which a closure holding the monitor until it returns would not.)
enum DetachedThread {
    /// Starts `body` on a thread called `name` (at most 15 bytes are kept; `top -H` shows it);
    /// 0 when started, else `pthread_create`'s error code (`body` then never runs).
    static func start(name: String, _ body: @escaping @Sendable () -> Void) -> Int32 {
        final class Box: Sendable {
            let name: String
            let body: @Sendable () -> Void
            init(_ name: String, _ body: @escaping @Sendable () -> Void) {
                self.name = name
                self.body = body
            }
        }
        let box = Unmanaged.passRetained(Box(name, body))
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { raw in
            let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
            _ = box.name.withCString(bgpolicy_name_this_thread)
            box.body()
            return nil
        }, box.toOpaque())
        if rc == 0 {
            pthread_detach(thread)
        } else {
            box.release()
        }
        return rc
    }
}

import BGPolicyCore
import BGPolicyDBus
import BGPolicySystem
import Glibc
import Logging

/// Runs every condition source against the system bus, udev and the session bus, feeding the hub.
///
/// The system bus is optional: without it the D-Bus sources are missing and udev alone
/// reports power. While it is missing, the agent connects again when its socket appears
/// (`SocketPathWatch`: no timer); when there is a socket that refuses it, or the address is
/// not a path, with a backoff (1 s doubling to 5 min), a timer that exists only then.
struct ConditionsService: Sendable {
    let hub: ConditionsHub
    let logger: Logger
    /// Sources on the agent's own session bus (the idle monitor): they live as long as the agent.
    /// Each has its re-read trigger, poked at resume and, by the agent, when a reload changes
    /// a setting the source built into what it set up.
    var sessionSources: [(source: any ConditionSource, rereads: Rereads)] = []
    let onSleep: @Sendable (SleepEvent) async -> Void

    func run() async {
        // udev runs for the whole life of the agent: it is the fallback the moment UPower goes.
        await withTaskGroup(of: Void.self) { group in
            let udevRereads = Rereads()
            group.addTask { await run(UdevPowerSource(polling: hub.udevPolling), rereads: udevRereads) }
            let sessionRereads = sessionSources.map(\.rereads)
            for (source, rereads) in sessionSources {
                group.addTask { await run(source, rereads: rereads) }
            }
            group.addTask { await runSystemBusSources(udevRereads: udevRereads, sessionRereads: sessionRereads) }
        }
    }

    /// Runs `source` to its end; `whenLost` runs after each report that it is lost.
    private func run(_ source: any ConditionSource, rereads: Rereads, whenLost: (@Sendable () -> Void)? = nil) async {
        let name = source.name
        let hub = hub
        let context = SourceContext(
            logger: logger.with(source: name), rereads: rereads.stream,
            sleep: { try await AgentExecutor.sleep(for: $0) },
            report: { report in
                await hub.apply(report, from: name)
                if case .lost = report { whenLost?() }
            })
        await source.run(context)
        // A source that returned is not live, whatever it said last; unless it was cancelled:
        // the agent is stopping, which says nothing about the machine (clients watching
        // Conditions would see the facts turn unknown as the agent leaves), or the system bus
        // went, and `runSystemBusSources` says its sources are lost.
        guard !Task.isCancelled else { return }
        await hub.apply(.lost, from: name)
        whenLost?()
    }

    private func runSystemBusSources(udevRereads: Rereads, sessionRereads: [Rereads]) async {
        var delay = Duration.seconds(1)
        var unreachable = false
        while !Task.isCancelled {
            let bus: DBusConnection
            do {
                bus = try await DBusConnection.connect(to: .system, logger: logger)
                if unreachable { logger.info("The system bus is reachable again") }
                unreachable = false
            } catch {
                if !unreachable {
                    // Missing from the start: say so, so that nothing waits for their first facts.
                    for name: ConditionSourceName in [.upower, .powerProfiles, .networkManager, .logind] {
                        await hub.apply(.lost, from: name)
                    }
                }
                guard await waitForSystemBus(after: error, delay: &delay, first: !unreachable) else { return }
                unreachable = true
                continue
            }
            let connectedAt = ContinuousClock.now
            let rereads = (upower: Rereads(), profiles: Rereads(), network: Rereads(), logind: Rereads())
            let onSleep = self.onSleep
            let logind = LogindSource(systemBus: bus) { event in
                await onSleep(event)
                // After resume nothing is trusted: every source reads its input again.
                if event == .resumed {
                    for r in [rereads.upower, rereads.profiles, rereads.network, udevRereads] + sessionRereads { r.poke() }
                }
            }
            let sources: [(any ConditionSource, Rereads)] = [
                (UPowerSource(systemBus: bus), rereads.upower), (PowerProfilesSource(systemBus: bus), rereads.profiles),
                (NetworkManagerSource(systemBus: bus), rereads.network), (logind, rereads.logind),
            ]
            // With UPower gone, power comes from udev, whose last reading may be hours old:
            // the kernel sends no uevent for a charge that drops (UPower polls for it). udev
            // reads the kernel's files again then.
            let rereadUdev: @Sendable () -> Void = { udevRereads.poke() }
            await withTaskGroup(of: Void.self) { group in
                for (source, rereads) in sources {
                    let whenLost = source.name == .upower ? rereadUdev : nil
                    group.addTask { await run(source, rereads: rereads, whenLost: whenLost) }
                }
                group.addTask {
                    await bus.waitUntilDisconnected()
                    self.logger.warning("Lost the system bus; reconnecting")
                }
                // Whichever ends first (the bus lost, or cancellation) ends them all.
                await group.next()
                group.cancelAll()
            }
            bus.close()
            // Ended with the bus, not with the agent: what they said no longer holds. (Those the
            // group's cancelling stopped did not say so themselves; see `run(_:rereads:)`.)
            if !Task.isCancelled {
                for (source, _) in sources { await hub.apply(.lost, from: source.name) }
                rereadUdev()
                // Nor can logind's resume reach the agent any more.
                await logind.resumeUnannouncedSleep(logger, why: "The system bus was lost")
                // A bus that lets the agent in and drops it at once (a proxy, a daemon failing
                // as it starts) would be a loop of connections and warnings: the same backoff
                // as a refused connection, until one lasts.
                if ContinuousClock.now - connectedAt < Self.lastingConnection {
                    logger.warning("The system bus dropped the agent as soon as it connected; waiting before the next try",
                                   metadata: ["retry": "in \(delay.components.seconds) s"])
                    do { try await AgentExecutor.sleep(for: delay) } catch { return }
                    delay = min(delay * 2, .seconds(300))
                } else {
                    delay = .seconds(1)
                }
            }
        }
    }

    /// A connection to the system bus that lasted this long was not dropped as it was made:
    /// the next one is tried at once, and the backoff starts again from 1 s.
    static let lastingConnection = Duration.seconds(10)
}

extension ConditionsService {
    /// After a failed connection to the system bus: says so (a warning the first time in a
    /// row, then at debug level) and waits until it is worth trying again. When the bus's
    /// socket is a path that does not exist, that is when something is created on its way
    /// (`SocketPathWatch`): no timer wakes the machine while there is no system bus. Otherwise
    /// (a socket there that refuses us, an address that is not a path, a path that cannot be
    /// watched) a backoff from 1 s to 5 minutes. False when the agent is stopping.
    private func waitForSystemBus(after error: any Error, delay: inout Duration, first: Bool) async -> Bool {
        let address = try? DBusConnection.address(for: .system)
        let socket = address.flatMap(SocketPathWatch.socketPath(ofAddress:))
        let missing = socket.map { access($0, F_OK) != 0 } ?? false
        let retry = if let socket, missing { "when \(socket) appears" } else { "in \(delay.components.seconds) s" }
        let metadata: Logger.Metadata = ["error": "\(error)", "retry": "\(retry)"]
        if first {
            logger.warning("The system bus is not reachable; UPower, NetworkManager, logind and power profiles are missing",
                           metadata: metadata)
        } else {
            logger.debug("The system bus is still not reachable", metadata: metadata)
        }
        if let socket, missing {
            do {
                try await SocketPathWatch.waitForPath(socket)
                return true
            } catch is CancellationError {
                return false
            } catch {
                logger.log(level: first ? .warning : .debug,
                           "Cannot watch for the system bus's socket to appear; retrying on a timer instead",
                           metadata: ["socket": "\(socket)", "error": "\(error)"])
            }
        }
        do { try await AgentExecutor.sleep(for: delay) } catch { return false }
        delay = min(delay * 2, .seconds(300))
        return true
    }
}

/// A re-read trigger for one source.
final class Rereads: Sendable {
    let stream: AsyncStream<Void>
    private let continuation: AsyncStream<Void>.Continuation

    init() {
        (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    func poke() { continuation.yield() }
}

extension Logger {
    func with(source: ConditionSourceName) -> Logger {
        var copy = self
        copy[metadataKey: "source"] = "\(source.rawValue)"
        return copy
    }
}

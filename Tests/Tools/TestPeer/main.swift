// bgpolicy-testpeer: a D-Bus peer built on BGPolicyDBus, for interoperability tests against
// clients and services that were not written with it (gdbus, busctl, Python GDBus).
// Tests/integration/test_dbus_interop.py drives it; scripts/leakcheck.sh runs its self-test
// under valgrind.

import BGPolicyDBus
import Glibc

let usage = """
    usage: bgpolicy-testpeer serve [--address ADDRESS] [--name NAME]
           bgpolicy-testpeer client --address ADDRESS --dest NAME
           bgpolicy-testpeer self-test [--address ADDRESS] [--rounds N]

      serve      own NAME (default \(TestPeerInterface.busName)) and export \(TestPeerInterface.name) at
                 \(TestPeerInterface.path); print "READY <unique name>" once serving; exit 0 on SIGTERM or
                 SIGINT, 2 if NAME is taken, 1 if the bus goes away
      client     call the Python GDBus service org.bgpolicy.PyPeer1 (Tests/integration/pyservice.py) at NAME;
                 print "ok CHECK" or "FAIL CHECK: why" per check; exit 0 only if every check passed
      self-test  serve and call ourselves on two connections, then close both; exit 0 if every check passed
                 (N rounds of concurrent echo calls, default 4)

    Without --address, the session bus (DBUS_SESSION_BUS_ADDRESS).
    """

/// The arguments after the mode: `--key value` pairs only.
struct Options {
    var values: [String: String] = [:]

    init(_ arguments: ArraySlice<String>, allowed: Set<String>) throws {
        var rest = arguments[...]
        while let key = rest.popFirst() {
            guard key.hasPrefix("--"), allowed.contains(String(key.dropFirst(2))) else {
                throw CheckFailure("unknown option \(key)")
            }
            var option = String(key.dropFirst(2))
            var value: String
            if let equals = option.firstIndex(of: "=") {
                value = String(option[option.index(after: equals)...])
                option = String(option[..<equals])
            } else {
                guard let next = rest.popFirst() else { throw CheckFailure("\(key) needs a value") }
                value = next
            }
            values[option] = value
        }
    }

    var bus: DBusConnection.Bus { values["address"].map { .address($0) } ?? .session }
}

func fail(usage message: String) -> Never {
    warn("bgpolicy-testpeer: \(message)\n\n\(usage)")
    exit(64)
}

let arguments = CommandLine.arguments
let mode = arguments.count > 1 ? arguments[1] : ""
let rest = arguments.dropFirst(2)
let status: Int32

switch mode {
case "serve":
    let options: Options
    do { options = try Options(rest, allowed: ["address", "name"]) } catch { fail(usage: "\(error)") }
    status = await Serve.run(bus: options.bus, name: options.values["name"] ?? TestPeerInterface.busName)
case "client":
    let options: Options
    do { options = try Options(rest, allowed: ["address", "dest"]) } catch { fail(usage: "\(error)") }
    guard let address = options.values["address"], let destination = options.values["dest"] else {
        fail(usage: "client needs --address and --dest")
    }
    status = await Client.run(bus: .address(address), destination: destination)
case "self-test", "--self-test":
    let options: Options
    do { options = try Options(rest, allowed: ["address", "rounds"]) } catch { fail(usage: "\(error)") }
    let rounds = options.values["rounds"].map { Int($0) ?? -1 } ?? 4
    guard rounds >= 0 else { fail(usage: "--rounds needs a number") }
    status = await SelfTest.run(bus: options.bus, rounds: rounds)
case "-h", "--help", "help":
    say(usage)
    status = 0
default:
    fail(usage: mode.isEmpty ? "no mode given" : "unknown mode \(mode)")
}
exit(status)

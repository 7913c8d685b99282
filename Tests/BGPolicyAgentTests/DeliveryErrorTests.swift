@testable import BGPolicyAgent
import BGPolicyDBus
import Testing

/// Which failed `RunTask`s count as the app's own answer (`TaskEngine.isAppsOwnAnswer`): a
/// content-available wake the app answers with an error is dropped, while one the bus could not
/// deliver waits for the next window. Telling them apart wrongly either drops wakes an app
/// never saw or keeps one it refuses in every window.
@Suite("delivery errors")
struct DeliveryErrorTests {
    @Test(arguments: [
        "org.bgpolicy.Error.NotPermitted", "org.example.Mail.Error.Offline",
        "org.freedesktop.DBus.Error.UnknownMethod", "org.freedesktop.DBus.Error.UnknownObject",
        "org.freedesktop.DBus.Error.UnknownInterface", "org.freedesktop.DBus.Error.InvalidArgs",
    ])
    func theAppsAnswer(name: String) {
        #expect(TaskEngine.isAppsOwnAnswer(DBusError.remote(name: name, message: "no")))
    }

    @Test(arguments: [
        "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner",
        "org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.Timeout",
        "org.freedesktop.DBus.Error.LimitsExceeded", "org.freedesktop.DBus.Error.AccessDenied",
        "org.freedesktop.DBus.Error.Spawn.ChildExited",
    ])
    func theBusFailing(name: String) {
        #expect(!TaskEngine.isAppsOwnAnswer(DBusError.remote(name: name, message: "no")))
    }

    /// The client library answers `Unavailable` to a RunTask that reaches a connection it is
    /// closing (`BGTaskScheduler.disconnect()`): "not now". Taken for a refusal, the wake was
    /// dropped, and a request's wait grew as after a refusal.
    @Test func aClosingAppIsNotRefusing() {
        #expect(!TaskEngine.isAppsOwnAnswer(DBusError.remote(name: "org.bgpolicy.Error.Unavailable", message: "disconnecting")))
    }

    @Test func notAReplyAtAll() {
        #expect(!TaskEngine.isAppsOwnAnswer(DBusError.disconnected))
    }
}

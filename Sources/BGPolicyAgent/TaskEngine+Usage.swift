import BGPolicyCore
import BGPolicyStore
import BGPolicySystem
import Logging

extension TaskEngine {
    /// An app unit appeared or went in the systemd user manager. The app's first unit is an
    /// open and its last unit's end a leave (`OpenedAppUnits`): the usage log gets a row
    /// (foreground, background), and an open of a registered app counts as its use, which lifts
    /// the inactivity rule and may let its work run now.
    ///
    /// Failures are logged, never thrown: nobody is waiting for an answer, and a missed row
    /// only makes the usage log a little less complete.
    func appUnitChanged(_ event: AppUnitEvent) {
        let appID = event.appID
        let metadata: Logger.Metadata = ["app.id": "\(appID)", "unit": "\(event.unit)", "change": "\(event.change.rawValue)"]
        // A unit of an app the agent is starting itself (D-Bus activation in a scope) is not
        // the user opening it.
        if event.change == .opened && isLaunching(appID) {
            logger.debug("App unit started by the agent's own launch; not counted as an open", metadata: metadata)
            return
        }
        let now = Self.wallNow()
        // Nor is one of an XDG autostart entry, which the session starts at login, or the unit
        // such an app moves into (`SessionStartedUnits`); their end is no leave either (an app
        // that said it was in the foreground is left when its last connection closes,
        // `lastConnectionClosed`).
        let wasFollower = sessionStartedUnits.followers.contains(event.unit)
        if sessionStartedUnits.isSessionStart(event, at: now) {
            logger.debug("Started by the session's autostart, not the user; not counted as use", metadata: metadata)
            if sessionStartedUnits.followers.contains(event.unit) != wasFollower { saveSessionStartedUnits() }
            return
        }
        guard event.change == .opened else {
            // A launch of an app already running often makes a unit that hands its window to
            // the running process and ends at once: the user has not left the app.
            guard openedUnits.close(event.unit, of: appID) else {
                logger.debug("App unit closed while another of the app runs; the app is not left", metadata: metadata)
                return
            }
            appendUsageOrWarn(appID, .background, at: now, metadata: metadata)
            logger.debug("App unit changed", metadata: metadata)
            noteLeft(appID, at: now)
            return
        }
        do {
            guard openedUnits.open(event.unit, of: appID) else {
                // Another launch of an app already open (a terminal's next window, a browser's
                // launch handed to its running process) is use: the record keeps it as the last
                // use (`bgpolicy apps`), so an app the user keeps launching is not held as
                // unused. It opens nothing, though: the predictor and `FollowEstimator` learn
                // the moments the user opens an app not in use, the window after an open is for
                // the apps the user may go on to, and the usage log pairs each open with one
                // leave, that of the app's last unit.
                logger.debug("App unit opened while another of the app runs; a use, not an open", metadata: metadata)
                try noteLastUse(of: appID, at: now)
                return
            }
            appendUsageOrWarn(appID, .foreground, at: now, metadata: metadata)
            logger.debug("App unit changed", metadata: metadata)
            try noteUse(of: appID, at: now)
        } catch {
            logger.warning("Could not record that the app was used", metadata: metadata.merging(["error": "\(error)"]) { $1 })
        }
    }

    /// The app units running when the agent connected to the user manager. Those the session
    /// did not start (`SessionStartedUnits`: autostart units, and the units they started, as
    /// recorded before a restart) are the apps the user has open now. They are in use; an app
    /// the usage log left in use with no such unit running was closed while the agent was not
    /// watching (at the end of the last session the agent may stop before the apps), and is
    /// not, so that windows after an open may refresh it again. Neither gets a window or a
    /// usage row: when it happened is not known. Apps in use by their own word (a registration,
    /// `ReportUsage`) in this run stay in use; an app the agent is launching itself is not
    /// counted by its unit, as in `appUnitChanged`. Each app's units are remembered, so that it
    /// is left when the last of them goes. Session units no longer running are forgotten.
    func appUnitsRunning(_ units: [RunningAppUnit]) {
        if sessionStartedUnits.keepOnly(running: Set(units.map(\.unit))) { saveSessionStartedUnits() }
        openedUnits = OpenedAppUnits(
            running: units.filter { !sessionStartedUnits.contains(unit: $0.unit) && !isLaunching($0.appID) })
        let inUse = openedUnits.apps.union(appsInUse.intersection(selfReportedInUse))
        guard inUse != appsInUse else { return }
        let closedUnseen = appsInUse.subtracting(inUse)
        logger.info(
            "Apps in use, from the user manager's running app units",
            metadata: ["apps.in_use": "\(inUse.map(\.rawValue).sorted())",
                       "apps.closed_unseen": "\(closedUnseen.map(\.rawValue).sorted())"])
        for appID in closedUnseen { refreshPlanner?.recordLeftUnseen(appID.rawValue) }
        for appID in inUse.subtracting(appsInUse) { refreshPlanner?.recordOpenedUnseen(appID.rawValue) }
        appsInUse = inUse
        requestEvaluation()
    }

    /// The last bus connection of `appID` closed. An app in use by its own word alone (it
    /// registered, or reported itself in the foreground, and no app unit of it runs) has exited:
    /// the user left it, as when an app unit goes. The usage log gets the close (the open came
    /// from the registration or from `ReportUsage`, and is logged too), so that a
    /// restart does not take the app for one still open; and the window after use may refresh
    /// it. An app with a running unit is left when its last unit goes; an app the agent launched
    /// and the user never opened was not in use.
    func lastConnectionClosed(_ appID: AppID) {
        guard appsInUse.contains(appID), selfReportedInUse.contains(appID), !openedUnits.contains(appID) else { return }
        let now = Self.wallNow()
        appendUsageOrWarn(appID, .background, at: now, metadata: ["app.id": "\(appID)"])
        logger.info("App left: its last bus connection closed, and no app unit of it runs", metadata: ["app.id": "\(appID)"])
        noteLeft(appID, at: now)
    }

    /// `ReportUsage` from an app with an app unit the user opened running (`OpenedAppUnits`):
    /// the agent saw it launched, and `ReportUsage` is for apps whose launches it cannot see.
    /// The unit's appearance was the open and its last unit's end is the leave, as `Register`
    /// takes it (`noteRegistrationAsOpen`): the user manager's word, where the report is the
    /// app's, and the usage log pairs each open with one leave. So a `foreground` is use within
    /// that open, as another launch of an app already open is (`appUnitChanged`): the record
    /// keeps it as the last use, with no row and no open learned (on GNOME, an app reporting
    /// itself at launch was counted opened twice). A `background` leaves nothing: the app stays
    /// in use, the CPU monitor's exemption included, until its last unit goes. Taken as a leave,
    /// it logged a close and opened the window after use while the app still ran, the unit's
    /// end logged a second, and the next `foreground` was an open the unit never saw. The app
    /// is no longer in use by its own word, though: should the unit be found gone unseen (the
    /// user manager restarted, `appUnitsRunning`), the app is not held in use. Either is the
    /// state reported last, so that the same again changes nothing. Throws when the record
    /// cannot be saved; nothing is remembered then.
    func reportWhileUnitRuns(_ appID: AppID, _ state: UsageState, at time: UnixTime) throws(StoreError) {
        if state == .foreground {
            try noteLastUse(of: appID, at: time)
            selfReportedInUse.insert(appID)
        } else {
            selfReportedInUse.remove(appID)
        }
        lastUsageReport[appID] = state
        logger.debug(
            "Usage report of an app whose unit runs; the unit says when it is opened and left",
            metadata: ["app.id": "\(appID)", "state": "\(state.rawValue)"])
    }

    /// Stores the units the session started (`SessionStartedUnits`), for the next run. A failed
    /// write is logged: this run keeps them in memory, and the next would take a scope started
    /// at login and still running for one the user opened.
    func saveSessionStartedUnits() {
        do {
            try store.setSessionStartedUnits(sessionStartedUnits.followers.sorted())
        } catch {
            logger.warning("Could not record the app units the session started", metadata: ["error": "\(error)"])
        }
    }

    /// `appendUsage` for what nobody waits on (the user manager's signals, a connection
    /// closing): a failure is logged with `metadata`, never thrown, since a missed row only makes
    /// the usage log a little less complete.
    func appendUsageOrWarn(_ appID: AppID, _ state: UsageState, at time: UnixTime, metadata: Logger.Metadata) {
        do {
            try appendUsage(appID, state, at: time)
        } catch {
            logger.warning("Could not record app usage", metadata: metadata.merging(["error": "\(error)"]) { $1 })
        }
    }

    /// The user opened `appID` at `time` (its unit appeared, or it reported itself in the
    /// foreground): the predictor learns it, and a registered app's record keeps it as its last
    /// use, which lifts the 7-day rule and may let its work run now. Throws when the record
    /// cannot be saved; the predictor has learned the open by then, as the usage log has it.
    func noteUse(of appID: AppID, at time: UnixTime) throws(StoreError) {
        noteOpen(appID, at: time)
        try noteLastUse(of: appID, at: time)
    }

    /// A registered app's record keeps `time` as its last use, which lifts the 7-day rule and may
    /// let its work run now. Throws when the record cannot be saved.
    func noteLastUse(of appID: AppID, at time: UnixTime) throws(StoreError) {
        guard var record = apps[appID]?.record else { return }
        record.lastUsedAt = time
        try store.saveApp(record)
        apps[appID]?.record = record
        requestEvaluation(for: appID)
    }
}

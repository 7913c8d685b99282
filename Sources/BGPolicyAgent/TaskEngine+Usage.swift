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
            let handedOff = openedUnits.isHandedOff(event.unit)
            guard openedUnits.close(event.unit, of: appID) else {
                logger.debug("App unit closed while another of the app runs; the app is not left", metadata: metadata)
                return
            }
            // An app that reported itself in the background while the unit ran was left then
            // (`reportWhileUnitRuns`): its close is in the log already.
            guard appsInUse.contains(appID) else {
                logger.debug("App unit closed after the app reported itself in the background; left already", metadata: metadata)
                return
            }
            // A launch handed to the process of an app in use by its own word (its scope ends
            // within a second), with that process still on the bus: no leave. The app is left
            // when it says so, or when its last connection closes (`lastConnectionClosed`).
            if handedOff, selfReportedInUse.contains(appID), apps[appID]?.connections.isEmpty == false {
                logger.debug("App unit closed while the app, in use by its own word, is still connected; not left", metadata: metadata)
                return
            }
            appendUsageOrWarn(appID, .background, at: now, metadata: metadata)
            logger.debug("App unit changed", metadata: metadata)
            noteLeft(appID, at: now)
            return
        }
        do {
            // In use by its own word already (it registered as opened, or reported itself in
            // the foreground): a launch of it now is use within that open, as below.
            let inUseByItsWord = isInUseByItsWord(appID)
            guard openedUnits.open(event.unit, of: appID, handedOff: inUseByItsWord), !inUseByItsWord else {
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
        if predicts {
            for appID in closedUnseen { refreshPlanner?.recordLeftUnseen(appID.rawValue) }
            for appID in inUse.subtracting(appsInUse) { refreshPlanner?.recordOpenedUnseen(appID.rawValue) }
        }
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
        guard isInUseByItsWord(appID), !openedUnits.contains(appID) else { return }
        let now = Self.wallNow()
        appendUsageOrWarn(appID, .background, at: now, metadata: ["app.id": "\(appID)"])
        logger.info("App left: its last bus connection closed, and no app unit of it runs", metadata: ["app.id": "\(appID)"])
        noteLeft(appID, at: now)
    }

    /// Whether `appID` is in use by its own word: it registered as opened, or reported itself in
    /// the foreground, and has not been left since.
    func isInUseByItsWord(_ appID: AppID) -> Bool {
        appsInUse.contains(appID) && selfReportedInUse.contains(appID)
    }

    /// `ReportUsage` from an app with an app unit the user opened running (`OpenedAppUnits`).
    /// The report changes the app's state only where it differs from what the agent holds:
    /// the unit's appearance was the open, so a `foreground` of the app in use is use within
    /// that open (the record keeps it as the last use, as another launch of an app already
    /// open, `appUnitChanged`), with no row and no open learned: on GNOME an app reporting
    /// itself at launch was counted opened twice. A `background` is the user leaving the app
    /// while it runs on (a window closed to the tray, another app brought up): a leave, with
    /// its row and the window after use, and the CPU monitor then watches its slices, as an
    /// app that reports its focus changes asks; a `foreground` after it is the user coming
    /// back, an open. The last unit's end leaves only an app still in use, so that each open
    /// pairs with one leave in the log. Throws when the record or the row cannot be saved;
    /// nothing is remembered then.
    func reportWhileUnitRuns(_ appID: AppID, _ state: UsageState, at time: UnixTime) throws(StoreError) {
        let inUse = appsInUse.contains(appID)
        switch (state, inUse) {
        case (.foreground, true):
            try noteLastUse(of: appID, at: time)
            logger.debug(
                "The app reported itself in the foreground while its unit runs and it is in use: a use, not an open",
                metadata: ["app.id": "\(appID)"])
        case (.foreground, false):
            try appendUsage(appID, .foreground, at: time)
            try noteUse(of: appID, at: time)
        case (.background, true):
            try appendUsage(appID, .background, at: time)
            noteLeft(appID, at: time)
        case (.background, false):
            break
        }
        lastUsageReport[appID] = state
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

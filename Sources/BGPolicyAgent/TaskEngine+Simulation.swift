import BGPolicyCore

/// `bgpolicy simulate launch` and `simulate expire`: the same delivery and expiry paths, started by hand.
extension TaskEngine {
    func simulateLaunch(app text: String, identifier: String) async throws(SchedulerError) {
        let appID = try SchedulerError.appID(text)
        guard apps[appID] != nil else { throw .unknownApp(text) }
        guard let request = pending[appID]?[identifier] else { throw .unknownPending(identifier, app: appID, lister: "ListPending") }
        if delivering.contains(appID) || saving[appID] != nil {
            throw SchedulerError(.unavailable, "a delivery to \(appID), or a change to its requests, is on its way; try again in a moment")
        }
        delivering.insert(appID)
        let length = request.kind == .refresh ? configuration.slices.refresh : configuration.slices.processing
        try await deliver(Launch(appID: appID, requests: [request], sliceLength: length), simulated: true)
        // Its work went: the evaluation timer may have been set for it (`endSaving`).
        requestEvaluation()
    }

    /// The unfinished task of `appID` with that identifier, and its slice.
    func runningTask(of appID: AppID, identifier: String) -> (Slice, Slice.Member)? {
        for slice in slices.values where slice.appID == appID {
            if let member = slice.openMembers.first(where: { $0.request.identifier == identifier }) {
                return (slice, member)
            }
        }
        return nil
    }

    func simulateExpiration(app text: String, identifier: String) throws(SchedulerError) {
        let appID = try SchedulerError.appID(text)
        guard apps[appID] != nil else { throw .unknownApp(text) }
        guard let (slice, member) = runningTask(of: appID, identifier: identifier) else {
            throw SchedulerError(.unknownTask, "\(appID) has no running task '\(SchedulerError.shown(identifier))'; 'bgpolicy simulate launch' starts one")
        }
        sendExpire(member.taskID, to: slice.connection)
        appendHistory(HistoryEntry(
            time: Self.wallNow(), appID: appID, identifier: identifier, taskID: member.taskID, event: .expirationWarned,
            kind: member.kind, detail: "ExpireTask sent: simulated expiration"))
    }
}

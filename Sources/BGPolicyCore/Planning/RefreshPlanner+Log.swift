/// The usage log learned again at start (the agent's `warmPlanner`), as the same events a
/// trace holds (`UsageEvent`).
extension RefreshPlanner {
    /// Learns `log`, in order, as the running agent learned it, and returns the apps it leaves
    /// in use (opened and not left).
    ///
    /// - Only the close of an app in use is a leave, as for the running agent: the log also
    ///   has the ends of launches the agent made and apps reporting themselves in the
    ///   background when not in use, and each such close learned as a leave would start a
    ///   trial of the user coming back that fails, lowering the app's chance after every restart.
    /// - Each event's time of day is the one the clock showed then (`localOffset`): 8 weeks of
    ///   log may span a change to or from daylight saving time, which the running agent
    ///   follows too; learned with today's offset, the weeks before it would teach every habit
    ///   an hour off. The offset is asked once per half hour of the log (zones change it on the
    ///   hour, or in a few on the half hour), not per event, and is left at the last event's.
    public mutating func learn(_ log: [UsageEvent], localOffset: (Double) -> Double) -> Set<String> {
        var inUse: Set<String> = []
        var offsetPeriod = -Double.infinity
        for event in log {
            let period = (event.time / 1800).rounded(.down)
            if period != offsetPeriod {
                offsetPeriod = period
                let offset = localOffset(event.time)
                if utcOffsetSeconds != offset { utcOffsetSeconds = offset }
            }
            if event.kind == .open {
                recordOpen(of: event.appID, at: event.time)
                inUse.insert(event.appID)
            } else if inUse.remove(event.appID) != nil {
                recordClose(of: event.appID, at: event.time)
            }
        }
        return inUse
    }
}

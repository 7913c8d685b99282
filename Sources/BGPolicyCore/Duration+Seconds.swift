extension Duration {
    /// The duration in seconds, for arithmetic with `UnixTime` and monotonic readings, which are
    /// plain `Double` seconds. Attoseconds below a double's precision are lost, which no policy
    /// number cares about.
    public var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}

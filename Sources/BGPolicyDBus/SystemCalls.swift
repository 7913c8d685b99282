import Glibc

/// The few libc calls this module makes, each returning errno-style results without trapping.
enum SystemCalls {
    static func close(_ fd: Int32) -> Int32 { Glibc.close(fd) }

    static func errnoDescription(_ code: Int32) -> String { String(cString: strerror(code)) }
}

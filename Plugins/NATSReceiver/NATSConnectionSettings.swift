import CNATS
import Glibc

/// The cnats options the receiver and the publisher share: servers, name, connect timeout, pings, credentials, TLS.
enum NATSConnectionSettings {
    /// New cnats options (the caller destroys them), loading libnats first: ``NATSReceiverError/library(detail:)``
    /// when it cannot be loaded.
    static func createOptions(servers: [String]) throws -> OpaquePointer {
        if let failure = herald_nats_load_failure() {
            throw NATSReceiverError.library(detail: String(cString: failure))
        }
        var optionsPointer: OpaquePointer?
        guard natsOptions_Create(&optionsPointer) == NATS_OK, let natsOptions = optionsPointer else {
            throw NATSReceiverError.connect(servers: servers, detail: "cannot create cnats options")
        }
        return natsOptions
    }

    static func apply(_ options: NATSReceiver.Options, to natsOptions: OpaquePointer) -> natsStatus {
        var steps: [() -> natsStatus] = [
            { withCStrings(options.servers) { natsOptions_SetServers(natsOptions, $0, Int32($1)) } },
            { natsOptions_SetName(natsOptions, options.connectionName) },
            { natsOptions_SetTimeout(natsOptions, options.connectTimeout.milliseconds) },
            { natsOptions_SetPingInterval(natsOptions, max(1, options.pingInterval.milliseconds)) },
            { natsOptions_SetMaxPingsOut(natsOptions, Int32(clamping: max(1, options.maxPingsOut))) },
        ]
        if let file = options.credentialsFile { steps.append { natsOptions_SetUserCredentialsFromFiles(natsOptions, file, nil) } }
        if let token = options.authToken { steps.append { natsOptions_SetToken(natsOptions, token) } }
        if let login = options.login { steps.append { natsOptions_SetUserInfo(natsOptions, login.user, login.password) } }
        if let tls = options.tls {
            steps.append { natsOptions_SetSecure(natsOptions, true) }
            if let ca = tls.caFile { steps.append { natsOptions_LoadCATrustedCertificates(natsOptions, ca) } }
            if let certificate = tls.certificateFile, let key = tls.keyFile {
                steps.append { natsOptions_LoadCertificatesChain(natsOptions, certificate, key) }
            }
        }
        return run(steps)
    }

    /// `url` with any user and password in it (`nats://user:password@host:4222`) replaced by `***`, for logs and
    /// errors: a server URL may carry credentials, and no secret is ever written to a log.
    static func redacted(_ url: String) -> String {
        let bytes = Array(url.utf8)
        guard let colon = bytes.indices.first(where: { bytes[$0...].starts(with: "://".utf8) }) else { return url }
        let authority = colon + 3
        let authorityEnd = bytes[authority...].firstIndex(of: UInt8(ascii: "/")) ?? bytes.endIndex
        guard let at = bytes[authority..<authorityEnd].lastIndex(of: UInt8(ascii: "@")) else { return url }
        return String(decoding: bytes[..<authority], as: UTF8.self) + "***" + String(decoding: bytes[at...], as: UTF8.self)
    }

    /// Every URL of `servers` redacted (``redacted(_:)``), as one string for a log line or an error.
    static func redacted(_ servers: [String]) -> String {
        servers.map { redacted($0) }.joined(separator: ", ")
    }

    /// Runs `steps` until one fails; its status, or `NATS_OK`.
    static func run(_ steps: [() -> natsStatus]) -> natsStatus {
        for step in steps {
            let status = step()
            if status != NATS_OK { return status }
        }
        return NATS_OK
    }

    private static func withCStrings<R>(_ strings: [String], _ body: (UnsafeMutablePointer<UnsafePointer<CChar>?>, Int) -> R) -> R {
        let copies = strings.map { UnsafePointer(strdup($0)) }
        defer { for copy in copies { free(UnsafeMutablePointer(mutating: copy)) } }
        var pointers = copies
        return pointers.withUnsafeMutableBufferPointer { body($0.baseAddress!, $0.count) }
    }
}

import CNATS
import Glibc

/// The cnats options the receiver and the publisher share: servers, name, connect timeout, credentials, TLS.
enum NATSConnectionSettings {
    static func apply(_ options: NATSReceiver.Options, to natsOptions: OpaquePointer) -> natsStatus {
        var steps: [() -> natsStatus] = [
            { withCStrings(options.servers) { natsOptions_SetServers(natsOptions, $0, Int32($1)) } },
            { natsOptions_SetName(natsOptions, options.connectionName) },
            { natsOptions_SetTimeout(natsOptions, options.connectTimeout.milliseconds) },
        ]
        if let file = options.credentialsFile { steps.append { natsOptions_SetUserCredentialsFromFiles(natsOptions, file, nil) } }
        if let token = options.authToken { steps.append { natsOptions_SetToken(natsOptions, token) } }
        if let tls = options.tls {
            steps.append { natsOptions_SetSecure(natsOptions, true) }
            if let ca = tls.caFile { steps.append { natsOptions_LoadCATrustedCertificates(natsOptions, ca) } }
            if let certificate = tls.certificateFile, let key = tls.keyFile {
                steps.append { natsOptions_LoadCertificatesChain(natsOptions, certificate, key) }
            }
        }
        return run(steps)
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

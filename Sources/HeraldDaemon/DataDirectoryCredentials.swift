import Glibc
package import HeraldHTTPReceiver
import HeraldSQLite
package import HeraldTLS
package import Logging

/// The senders of the store in `directory`, as the HTTP endpoint takes them; none without a store. A sender whose
/// scopes the store holds in a form this release does not know has none.
package func storedSenders(directory: String) throws -> [SenderCredential] {
    var info = stat()
    guard stat(SQLiteStore.path(inDirectory: directory), &info) == 0 else { return [] }
    return try SQLiteStore.senders(directory: directory).map {
        SenderCredential(
            name: $0.name, secretHash: $0.secretHash, scopes: SenderScopes(parsing: $0.scopes) ?? [], rate: $0.rate, burst: $0.burst,
            createdAt: $0.createdAt, revokedAt: $0.revokedAt)
    }
}

/// What `herald serve` takes from the data directory for service accounts and the FCM proxy.
package enum ServiceAccountCredentials {
    /// The names the FCM proxy's certificate is for: the hosts it tunnels to.
    package static let proxyHosts = ["fcm.googleapis.com", "iid.googleapis.com", "oauth2.googleapis.com"]

    /// The keys issued in the store of `directory`, as the receiver checks them; none without a store.
    package static func publicKeys(directory: String) throws -> [ServiceAccountPublicKey] {
        var info = stat()
        guard stat(SQLiteStore.path(inDirectory: directory), &info) == 0 else { return [] }
        return try SQLiteStore.serviceAccountKeys(directory: directory).map {
            ServiceAccountPublicKey(
                keyID: $0.keyID, clientEmail: $0.clientEmail, publicKeyPEM: $0.publicKeyPEM, revoked: $0.revokedAt != nil,
                scopes: keyScopes($0.scopes))
        }
    }

    /// The CA in `<directory>/fcm-proxy`, created when missing (its key 0600).
    package static func authority(directory: String) throws -> LocalCertificateAuthority {
        try SQLiteStore.makeDirectory(directory)
        return try LocalCertificateAuthority.openOrCreate(
            directory: directory + "/fcm-proxy", name: "Herald FCM proxy CA", permittedNames: proxyHosts)
    }

    /// The TLS context of the proxy's tunnels: a server certificate for ``proxyHosts`` issued now by the CA.
    package static func proxyContext(directory: String, logger: Logger) throws -> TLSServerContext {
        let authority = try authority(directory: directory)
        try authority.issueServerCertificate(names: proxyHosts)
        var tlsLogger = logger
        tlsLogger[metadataKey: "component"] = "fcm-proxy"
        let context = try TLSServerContext(
            configuration: .init(certificateFile: authority.serverCertificateFile, keyFile: authority.serverKeyFile), logger: tlsLogger)
        logger.info("FCM proxy on: app servers trust the CA", metadata: ["ca": "\(authority.certificateFile)"])
        return context
    }
}

/// The scopes of a key as the store holds them: `nil` (a key issued before keys had scopes) is every scope, a list
/// this release cannot read none.
package func keyScopes(_ stored: String?) -> SenderScopes {
    stored.map { SenderScopes(parsing: $0) ?? [] } ?? .all
}

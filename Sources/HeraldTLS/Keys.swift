import COpenSSL
import Glibc

/// Why a key, a signature or a certificate could not be made or read.
public enum KeyError: Error, Equatable, CustomStringConvertible {
    /// The text is not a public key of the kind needed: RSA for RS256, P-256 for ES256 (PEM, or for P-256 its point).
    case invalidPublicKey(String)
    /// OpenSSL failed (out of memory, no randomness).
    case openSSL(String)
    /// A file of the certificate authority cannot be read or written.
    case file(path: String, reason: String)

    public var description: String {
        switch self {
        case .invalidPublicKey(let reason): "not a usable public key: \(reason)"
        case .openSSL(let reason): "OpenSSL: \(reason)"
        case .file(let path, let reason): "\(path): \(reason)"
        }
    }
}

/// A new RSA key pair, as a Google service-account file holds its private half: the private key as PKCS#8 PEM
/// (`-----BEGIN PRIVATE KEY-----`), the public key as SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`).
public struct RSAKeyPair: Sendable {
    /// The private key, PKCS#8 PEM.
    public let privateKeyPEM: String
    /// The public key, SubjectPublicKeyInfo PEM.
    public let publicKeyPEM: String

    /// Generates a key of `bits` (2048 unless told).
    public static func generate(bits: Int = 2048) throws(KeyError) -> RSAKeyPair {
        ERR_clear_error()
        var privatePEM: UnsafeMutablePointer<CChar>?
        var publicPEM: UnsafeMutablePointer<CChar>?
        guard herald_rsa_generate(UInt32(bits), &privatePEM, &publicPEM) == 1, let privatePEM, let publicPEM else {
            throw .openSSL("cannot generate an RSA key: \(openSSLError())")
        }
        defer {
            free(privatePEM)
            free(publicPEM)
        }
        return RSAKeyPair(privateKeyPEM: String(cString: privatePEM), publicKeyPEM: String(cString: publicPEM))
    }

    /// The RS256 signature (RSASSA-PKCS1-v1_5 with SHA-256) of `data` with the private key in `privateKeyPEM`.
    public static func signRS256(_ data: [UInt8], privateKeyPEM: String) throws(KeyError) -> [UInt8] {
        ERR_clear_error()
        var signature: UnsafeMutablePointer<UInt8>?
        var length = 0
        guard herald_rs256_sign(privateKeyPEM, data, data.count, &signature, &length) == 1, let signature else {
            throw .openSSL("cannot sign: \(openSSLError())")
        }
        defer { free(signature) }
        return Array(UnsafeBufferPointer(start: signature, count: length))
    }
}

/// An RSA public key that checks RS256 signatures (JWTs signed with a service account's key). Immutable; any thread.
public final class RS256PublicKey: @unchecked Sendable {
    // @unchecked Sendable: the EVP_PKEY is only read after init; OpenSSL allows concurrent verifications with it.
    private let key: OpaquePointer

    /// Reads a SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`) holding an RSA key.
    public init(pem: String) throws(KeyError) {
        ERR_clear_error()
        guard let key = herald_public_key_read(pem) else { throw .invalidPublicKey(openSSLError()) }
        guard herald_key_is_rsa(key) == 1 else {
            EVP_PKEY_free(key)
            throw .invalidPublicKey("the key is not RSA")
        }
        self.key = key
    }

    deinit { EVP_PKEY_free(key) }

    /// Whether `signature` is this key's RS256 signature of `data`.
    public func isValidSignature(_ signature: [UInt8], for data: [UInt8]) -> Bool {
        let valid = herald_rs256_verify(key, data, data.count, signature, signature.count) == 1
        ERR_clear_error()
        return valid
    }
}

/// A P-256 public key that checks ES256 signatures (ECDSA with SHA-256, as JWS writes them: `r` and `s`, 32 bytes
/// each): APNs provider tokens, VAPID. Immutable; any thread.
public final class P256PublicKey: @unchecked Sendable {
    // @unchecked Sendable: the EVP_PKEY is only read after init; OpenSSL allows concurrent verifications with it.
    private let key: OpaquePointer
    /// The point, X9.63 uncompressed (`04`, x, y: 65 bytes), as Web Push and VAPID write a key.
    public let x963Representation: [UInt8]

    /// Reads a SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`) holding a P-256 key.
    public convenience init(pem: String) throws(KeyError) {
        ERR_clear_error()
        guard let key = herald_public_key_read(pem) else { throw .invalidPublicKey(openSSLError()) }
        try self.init(owning: key)
    }

    /// The key whose point is `x963Representation` (65 bytes, uncompressed); throws when it is not a point of P-256.
    public convenience init(x963Representation: [UInt8]) throws(KeyError) {
        ERR_clear_error()
        guard let key = herald_p256_public_key_from_point(x963Representation, x963Representation.count) else {
            ERR_clear_error()
            throw .invalidPublicKey("not an uncompressed point of P-256 (65 bytes, 04 x y)")
        }
        try self.init(owning: key)
    }

    /// Takes `key` (freed here on failure).
    private init(owning key: OpaquePointer) throws(KeyError) {
        guard let point = p256Point(of: key) else {
            EVP_PKEY_free(key)
            throw .invalidPublicKey("the key is not P-256")
        }
        self.key = key
        x963Representation = point
    }

    deinit { EVP_PKEY_free(key) }

    /// The key as SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`).
    public var pemRepresentation: String {
        guard let text = herald_public_key_pem(key) else { return "" }
        defer { free(text) }
        return String(cString: text)
    }

    /// Whether `signature` (`r` and `s`, 32 bytes each) is this key's ES256 signature of `data`.
    public func isValidES256Signature(_ signature: [UInt8], for data: [UInt8]) -> Bool {
        let valid = herald_es256_verify(key, data, data.count, signature, signature.count) == 1
        ERR_clear_error()
        return valid
    }
}

/// A P-256 private key that makes ES256 signatures: what an APNs `.p8` key and a VAPID key are (for tests and tools;
/// the daemon only verifies). Immutable; any thread.
public final class P256PrivateKey: @unchecked Sendable {
    // @unchecked Sendable: the EVP_PKEY is only read after init; OpenSSL allows concurrent signing with it.
    private let key: OpaquePointer
    /// The public half.
    public let publicKey: P256PublicKey

    /// A new random key.
    public convenience init() throws(KeyError) {
        ERR_clear_error()
        guard let key = herald_p256_generate() else { throw .openSSL("cannot generate a P-256 key: \(openSSLError())") }
        try self.init(owning: key)
    }

    /// Reads a PEM private key: PKCS#8 (`-----BEGIN PRIVATE KEY-----`, as Apple's `.p8` files) or SEC1
    /// (`-----BEGIN EC PRIVATE KEY-----`), on P-256.
    public convenience init(pem: String) throws(KeyError) {
        ERR_clear_error()
        guard let key = herald_private_key_read(pem) else {
            throw .openSSL("not a PEM private key: \(openSSLError())")
        }
        try self.init(owning: key)
    }

    private init(owning key: OpaquePointer) throws(KeyError) {
        // The public half as a key of its own (its point), so that it outlives this one and verifies alone.
        guard let point = p256Point(of: key) else {
            EVP_PKEY_free(key)
            throw .openSSL("the private key is not P-256")
        }
        do {
            publicKey = try P256PublicKey(x963Representation: point)
        } catch {
            EVP_PKEY_free(key)
            throw error
        }
        self.key = key
    }

    deinit { EVP_PKEY_free(key) }

    /// The key as PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`), as Apple hands out `.p8` keys.
    public var pemRepresentation: String {
        guard let text = herald_private_key_pem(key) else { return "" }
        defer { free(text) }
        return String(cString: text)
    }

    /// The ES256 signature of `data`: `r` and `s`, 32 bytes each (a new random nonce every time).
    public func signES256(_ data: [UInt8]) throws(KeyError) -> [UInt8] {
        ERR_clear_error()
        var signature = [UInt8](repeating: 0, count: 64)
        guard herald_es256_sign(key, data, data.count, &signature) == 1 else {
            throw .openSSL("cannot sign: \(openSSLError())")
        }
        return signature
    }
}

/// The public point of `key`, X9.63 uncompressed (65 bytes), when it is a P-256 key; `nil` for any other.
private func p256Point(of key: OpaquePointer) -> [UInt8]? {
    var point = [UInt8](repeating: 0, count: 65)
    guard herald_key_is_p256(key) == 1, herald_ec_public_point(key, &point, point.count) == 65 else {
        ERR_clear_error()
        return nil
    }
    return point
}

/// The SHA-256 digest of `bytes` (32 bytes).
public func sha256(_ bytes: some Collection<UInt8>) -> [UInt8] {
    var digest = [UInt8](repeating: 0, count: 32)
    let done = Array(bytes).withUnsafeBufferPointer { herald_sha256($0.baseAddress, $0.count, &digest) }
    precondition(done == 1, "SHA-256 failed: \(openSSLError())")
    return digest
}

/// A certificate authority of Herald's own, kept in a directory: `ca.pem` (its certificate, for clients to trust)
/// and `ca-key.pem` (its P-256 key, mode 0600, readable by the daemon's user only). It issues the server certificate
/// a listener presents for names that are not Herald's (``issueServerCertificate(names:)``).
public struct LocalCertificateAuthority: Sendable {
    /// The directory of the files.
    public let directory: String
    /// The CA certificate, PEM: what clients add to their trust.
    public var certificateFile: String { directory + "/ca.pem" }
    /// The CA's private key, PEM, mode 0600.
    public var keyFile: String { directory + "/ca-key.pem" }
    /// The last server certificate issued (PEM).
    public var serverCertificateFile: String { directory + "/server.pem" }
    /// The last server certificate's private key (PEM, mode 0600).
    public var serverKeyFile: String { directory + "/server-key.pem" }

    /// The authority in `directory` (created, mode 0700, when missing), its key and certificate made the first time
    /// (valid ten years, named `name`).
    ///
    /// With `permittedNames`, the CA certificate carries critical name constraints: clients that trust it accept
    /// its certificates for those DNS names (and names under them) only, so its key, were it stolen, could not
    /// vouch for any other site. (A CA made before without them keeps working as it is; delete the directory to
    /// make a constrained one.)
    public static func openOrCreate(
        directory: String, name: String = "Herald local CA", permittedNames: [String] = []
    ) throws(KeyError) -> LocalCertificateAuthority {
        let authority = LocalCertificateAuthority(directory: directory)
        if mkdir(directory, 0o700) != 0, errno != EEXIST {
            throw .file(path: directory, reason: String(cString: strerror(errno)))
        }
        return try locked(directory) { () throws(KeyError) in
            try authority.createUnlessPresent(name: name, permittedNames: permittedNames)
            return authority
        }
    }

    /// Makes the key and certificate unless both are there; the caller holds the directory's lock.
    private func createUnlessPresent(name: String, permittedNames: [String]) throws(KeyError) {
        let authority = self
        if access(authority.certificateFile, R_OK) == 0, access(authority.keyFile, R_OK) == 0 { return }
        // Half a pair (a stop between the two writes below): both are made again, never a new key beside an old
        // certificate.
        unlink(authority.certificateFile)
        unlink(authority.keyFile)
        ERR_clear_error()
        var keyPEM: UnsafeMutablePointer<CChar>?
        var certificatePEM: UnsafeMutablePointer<CChar>?
        let constraints = permittedNames.map { "permitted;DNS:\($0)" }.joined(separator: ",")
        guard herald_ca_create(name, 3650, permittedNames.isEmpty ? nil : "critical," + constraints, &keyPEM, &certificatePEM) == 1,
            let keyPEM, let certificatePEM
        else {
            throw .openSSL("cannot create the certificate authority: \(openSSLError())")
        }
        defer {
            free(keyPEM)
            free(certificatePEM)
        }
        try Self.writeFile(authority.keyFile, String(cString: keyPEM), mode: 0o600)
        try Self.writeFile(authority.certificateFile, String(cString: certificatePEM), mode: 0o644)
    }

    /// Runs `body` holding an exclusive `flock` on the directory's `.lock` file: two processes making or using the
    /// authority at once (`herald credentials ca` beside a first `herald serve --fcm-proxy`) take turns, so neither
    /// writes its key beside the other's certificate, nor one's server key beside the other's server certificate.
    private static func locked<T>(_ directory: String, _ body: () throws(KeyError) -> T) throws(KeyError) -> T {
        let path = directory + "/.lock"
        let fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .file(path: path, reason: String(cString: strerror(errno))) }
        defer { close(fd) }
        while flock(fd, LOCK_EX) != 0 {
            guard errno == EINTR else { throw .file(path: path, reason: String(cString: strerror(errno))) }
        }
        return try body()
    }

    /// Issues a server certificate for `names` (DNS names; the first is its common name), valid a year, with a new
    /// key, and writes both to ``serverCertificateFile`` and ``serverKeyFile`` (replacing the previous ones).
    public func issueServerCertificate(names: [String]) throws(KeyError) {
        try Self.locked(directory) { () throws(KeyError) in try issueUnlocked(names: names) }
    }

    private func issueUnlocked(names: [String]) throws(KeyError) {
        let caKey = try readFile(keyFile)
        let caCertificate = try readFile(certificateFile)
        let altNames = names.map { "DNS:\($0)" }.joined(separator: ",")
        ERR_clear_error()
        var keyPEM: UnsafeMutablePointer<CChar>?
        var certificatePEM: UnsafeMutablePointer<CChar>?
        guard herald_ca_issue_server(caKey, caCertificate, names.first ?? "herald", altNames, 365, &keyPEM, &certificatePEM) == 1,
            let keyPEM, let certificatePEM
        else {
            throw .openSSL("cannot issue a server certificate with the CA in \(directory): \(openSSLError())")
        }
        defer {
            free(keyPEM)
            free(certificatePEM)
        }
        try Self.writeFile(serverKeyFile, String(cString: keyPEM), mode: 0o600)
        try Self.writeFile(serverCertificateFile, String(cString: certificatePEM), mode: 0o644)
    }

    private func readFile(_ path: String) throws(KeyError) -> String {
        // "e": close-on-exec, so that the CA key's descriptor never reaches a child spawned meanwhile.
        guard let file = fopen(path, "re") else { throw .file(path: path, reason: String(cString: strerror(errno))) }
        defer { fclose(file) }
        var text: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = fread(&buffer, 1, buffer.count, file)
            if count == 0 { break }
            text += buffer[..<count]
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// Writes `text` to `path` with `mode` from its first byte: a temporary file beside it, renamed over it.
    static func writeFile(_ path: String, _ text: String, mode: mode_t) throws(KeyError) {
        let temporary = path + ".tmp"
        unlink(temporary)
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard fd >= 0 else { throw .file(path: temporary, reason: String(cString: strerror(errno))) }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        let synced = fsync(fd) == 0
        close(fd)
        guard written == bytes.count, synced, rename(temporary, path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary)
            throw .file(path: path, reason: reason)
        }
    }
}

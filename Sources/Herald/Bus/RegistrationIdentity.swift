import Synchronization

/// The instance's identity: its installation ID (`fid`) and registration token
/// (`<installation id>:<random, base64url>`, 256 bits from the system's secure generator).
///
/// Kept in memory here; the embedded store persists it so that it survives restarts.
public struct RegistrationIdentity: Sendable, Hashable {
    public var installationID: String
    public var token: String?

    /// A new installation ID with a new token.
    public static func mint() -> RegistrationIdentity {
        let installationID = RegistrationIdentity.randomBase64URL(bytes: 16)
        return RegistrationIdentity(installationID: installationID, token: mintToken(for: installationID))
    }

    /// A new token for `installationID`.
    public static func mintToken(for installationID: String) -> String {
        "\(installationID):\(randomBase64URL(bytes: 32))"
    }

    /// `bytes` random bytes from the system's secure generator (getrandom), base64url without padding.
    static func randomBase64URL(bytes count: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<count).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        return base64URL(bytes)
    }

    static func base64URL(_ bytes: [UInt8]) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var index = 0
        while index + 3 <= bytes.count {
            let chunk = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            out += [alphabet[Int(chunk >> 18 & 63)], alphabet[Int(chunk >> 12 & 63)], alphabet[Int(chunk >> 6 & 63)], alphabet[Int(chunk & 63)]]
            index += 3
        }
        let rest = bytes.count - index
        if rest == 1 {
            let chunk = UInt32(bytes[index]) << 16
            out += [alphabet[Int(chunk >> 18 & 63)], alphabet[Int(chunk >> 12 & 63)]]
        } else if rest == 2 {
            let chunk = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
            out += [alphabet[Int(chunk >> 18 & 63)], alphabet[Int(chunk >> 12 & 63)], alphabet[Int(chunk >> 6 & 63)]]
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// Makes message IDs that are unique per instance: a random 64-bit start, counting up, in decimal
/// (the form FCM's `gcm.message_id` takes). Callable from any thread.
final class MessageIDGenerator: Sendable {
    private let next = Atomic<UInt64>(UInt64.random(in: 1_000_000_000_000_000 ... 9_000_000_000_000_000))
    func make() -> String {
        String(next.add(1, ordering: .relaxed).newValue)
    }
}

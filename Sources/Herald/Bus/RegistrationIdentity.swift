import HeraldJSON
import Synchronization

/// Mints the instance's identity: its installation ID (`fid`, 128 random bits) and registration token
/// (`<installation id>:<256 random bits>`, base64url), from the system's secure generator.
public enum RegistrationIdentity {
    /// A new installation ID: 22 base64url characters of 128 bits whose first four are `0111`, as Firebase
    /// Installations makes them, so an ID (and a token, which starts with it) begins with `c`, `d`, `e` or `f` —
    /// never with `-`, which a command line would take for an option.
    public static func mintInstallationID() -> String {
        var generator = SystemRandomNumberGenerator()
        var bytes = (0..<16).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        bytes[0] = 0b0111_0000 | (bytes[0] & 0b0000_1111)
        return base64URL(bytes)
    }

    /// The identity to use given what the store holds: the stored one, with an installation ID minted when there
    /// is none and a token minted when there is none and `autoInit` is on. `changed` says whether it must be saved.
    public static func resolve(_ stored: StoredIdentity?, autoInit: Bool) -> (identity: StoredIdentity, changed: Bool) {
        var identity = stored ?? StoredIdentity(installationID: mintInstallationID(), token: nil)
        var changed = stored == nil
        if identity.token == nil, autoInit {
            identity.token = mintToken(for: identity.installationID)
            changed = true
        }
        return (identity, changed)
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
            out += [
                alphabet[Int(chunk >> 18 & 63)], alphabet[Int(chunk >> 12 & 63)], alphabet[Int(chunk >> 6 & 63)], alphabet[Int(chunk & 63)],
            ]
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

/// Makes message IDs that are unique per instance: a random start, counting up, in decimal (the form FCM's
/// `gcm.message_id` takes). Fifteen digits, so that an ID is a small string, kept inline: no allocation, and nothing
/// to free when the presented notifications and the inbox let it go (a 16-digit one was a heap object freed when it
/// had long gone cold). The start is one of 7 × 10¹⁴, so that the IDs of one run and the next do not meet. Callable
/// from any thread.
final class MessageIDGenerator: Sendable {
    private let next = Atomic<UInt64>(UInt64.random(in: 100_000_000_000_000...800_000_000_000_000))
    func make() -> String {
        JSONWriter.decimalString(next.add(1, ordering: .relaxed).newValue)
    }
}

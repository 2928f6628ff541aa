import Glibc
import HeraldHTTPReceiver

/// One APNs provider key of `herald serve` (`--apns-key KEYID:TEAMID:PATH`, the `apns-keys` list): the key ID and
/// team ID Apple shows with the key, and the PEM file holding it (the `.p8` itself, or its public key).
struct APNsKeySetting: Equatable, Sendable {
    let keyID: String
    let teamID: String
    let path: String

    /// `KEYID:TEAMID:PATH` (the path may hold colons); `nil` when a part is missing or an ID is not letters and digits.
    init?(parsing text: String) {
        guard let (keyID, teamID, path) = HTTPReceiver.Settings.apnsKey(text) else { return nil }
        self.keyID = keyID
        self.teamID = teamID
        self.path = path
    }

    /// The key, read from its file. Throws a `CommandFailure` naming the key and the file.
    func load() throws -> APNsProviderKey {
        guard let contents = readWholeFile(path) else {
            throw CommandFailure(message: "herald: APNs provider key \(keyID): cannot read \(path): \(String(cString: strerror(errno)))")
        }
        do {
            return try APNsProviderKey(keyID: keyID, teamID: teamID, pem: String(decoding: contents, as: UTF8.self))
        } catch {
            throw CommandFailure(message: "herald: \(error) (in \(path))")
        }
    }
}

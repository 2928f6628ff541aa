public import Herald

extension HTTPReceiver {
    /// The receiver's settings in a daemon's configuration (`herald serve`): the schema its flags, environment
    /// variables, config file keys and reference come from.
    public enum Settings {
        public static let http = ConfigurationSetting(
            "http", .string, default: .string("127.0.0.1:8080"), "127.0.0.1:8080",
            allowed: "HOST:PORT (a numeric address or localhost), [IPv6]:PORT, or none",
            help: "The HTTP receiver's address; 'none' turns it off.", valueName: "host:port",
            accepts: { $0 == "none" || SocketAddress(parsing: $0)?.port != nil })
        public static let authTokenFile = ConfigurationSetting(
            "auth-token-file", .string, default: nil, "none: HERALD_AUTH_TOKEN, when set, is the secret",
            allowed: "a non-empty file path",
            help:
                "A file holding the bearer secret senders must present (surrounding whitespace trimmed); it wins over HERALD_AUTH_TOKEN. With neither, HTTP may listen on loopback only.",
            valueName: "file")
        public static let apnsKeys = ConfigurationSetting(
            "apns-keys", .list, default: .list([]), "none",
            allowed: "a list of KEYID:TEAMID:PATH, PATH a PEM file of the key (the .p8 or its public key) (environment: separated by ',')",
            help:
                "An APNs provider key: POST /3/device/{token} then needs a provider token (JWT, ES256) it signed, or the bearer secret; repeatable. A key that cannot be read or used stops the start, naming it.",
            flag: "--apns-key", valueName: "keyid:teamid:path", environmentSeparator: ",", accepts: { apnsKey($0) != nil })
        public static let fcmProxy = ConfigurationSetting(
            "fcm-proxy", .boolean, default: .boolean(false), "false", allowed: "true or false",
            help:
                "Serve Google's FCM, IID and OAuth hosts to unmodified Admin SDK app servers: the HTTP endpoint accepts CONNECT to fcm.googleapis.com:443, iid.googleapis.com:443 and oauth2.googleapis.com:443 only, with TLS inside from a CA in the data directory (herald credentials ca); needs http without tls-cert."
        )

        /// The section: the HTTP endpoint, its secret, its APNs keys and the FCM proxy.
        public static let section = ConfigurationSection(
            name: "HTTPReceiver", summary: "The FCM v1 and APNs-style HTTP endpoint.", settings: [http, authTokenFile, apnsKeys, fcmProxy])

        /// `KEYID:TEAMID:PATH` (the path may hold colons) as its parts; `nil` when a part is missing or an ID is not
        /// letters and digits.
        public static func apnsKey(_ text: String) -> (keyID: String, teamID: String, path: String)? {
            let parts = text.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 3, !parts[2].isEmpty,
                [parts[0], parts[1]].allSatisfy({ !$0.isEmpty && $0.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) } })
            else { return nil }
            return (parts[0], parts[1], parts[2])
        }
    }
}

public import Herald

extension ImageAttachment {
    /// The content modifier's settings in a daemon's configuration (`herald serve`).
    public enum Settings {
        public static let ca = ConfigurationSetting(
            "image-attachment-ca", .string, default: nil, "the system's CAs", allowed: "a non-empty file path",
            help:
                "A PEM file of the CAs that sign the certificates of the servers notification images (fcm_options.image) are downloaded from, instead of the system's.",
            valueName: "file")
        public static let maxBytes = ConfigurationSetting(
            "image-attachment-max-bytes", .integer(1...1_073_741_824), default: .integer(10 * 1024 * 1024), "10485760",
            allowed: "a whole number of bytes from 1 to 1073741824",
            help: "The largest notification image downloaded; a larger one is not attached (logged and counted).", valueName: "bytes")

        /// The section: the CAs and the size limit of image downloads.
        public static let section = ConfigurationSection(
            name: "ImageAttachment", summary: "A mutable-content notification's https image downloaded and attached.",
            settings: [ca, maxBytes])
    }
}

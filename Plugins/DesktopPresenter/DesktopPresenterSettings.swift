public import Herald

extension DesktopPresenter {
    /// The presenter's settings in a daemon's configuration (`herald serve`, with `presenter: desktop`).
    public enum Settings {
        public static let appName = ConfigurationSetting(
            "desktop-app-name", .string, default: .string("Herald"), "Herald", allowed: "a non-empty name",
            help: "The application name desktop notifications show (and their summary when a message has no title).", valueName: "name")
        public static let appIcon = ConfigurationSetting(
            "desktop-app-icon", .string, default: .string(""), "none", allowed: "a themed icon name, a file:// URL, or empty for none",
            help: "The application icon desktop notifications show.", valueName: "icon", accepts: { _ in true })
        public static let desktopEntry = ConfigurationSetting(
            "desktop-entry", .string, default: nil, "none (no desktop-entry hint, no badge)",
            allowed: "a .desktop file's name without the extension",
            help: "The application's desktop entry: the desktop-entry hint, and the launcher whose badge a notification's badge sets.",
            valueName: "name", accepts: { !$0.isEmpty && !$0.contains("/") })

        /// The section: what the notifications say they come from.
        public static let section = ConfigurationSection(
            name: "DesktopPresenter", summary: "Notifications on the Linux desktop through org.freedesktop.Notifications.",
            settings: [appName, appIcon, desktopEntry])
    }
}

extension DesktopPresenter.Options {
    /// The options `values` give; the others keep their defaults.
    public init(configuration values: ConfigurationValues) {
        self.init()
        appName = values.string(DesktopPresenter.Settings.appName) ?? appName
        appIcon = values.string(DesktopPresenter.Settings.appIcon) ?? appIcon
        desktopEntry = values.string(DesktopPresenter.Settings.desktopEntry)
    }
}

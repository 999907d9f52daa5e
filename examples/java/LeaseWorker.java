/*
 * dlock lease worker with the PostgreSQL JDBC driver: acquire, renew in the
 * background, fence every write with the token, release.
 *
 *   javac -d classes LeaseWorker.java
 *   java -cp classes:/usr/share/java/postgresql.jar LeaseWorker \
 *       --url 'jdbc:postgresql://127.0.0.1:6432/app?user=app&password=secret' \
 *       --name nightly-report --ttl 10 --steps 5 --step-time 1
 *
 * It needs dlock in the database and the table job_progress (see
 * examples/README.md): the work it does is to write one row per step.
 *
 * Exit status: 0 work done and lease released; 3 lease lost (a renewal
 * returned NULL, or with --events-url its "forced" or "expired" event came),
 * work stopped; 4 lease lost (a fenced write was refused with SQLSTATE
 * DL001), work stopped; 5 lease not granted within --timeout; 1 error.
 *
 * With --events-url JDBC-URL (a direct session connection: LISTEN does not
 * work through PgBouncer in transaction mode) it listens to dlock's change
 * events and learns that its lease was forced or expired at once, not at its
 * next renewal; the renewals and the fenced writes stay, for an event lost
 * with its connection.
 *
 * Works directly and behind PgBouncer in transaction mode: every call passes
 * an explicit owner, and prepareThreshold=0 keeps the driver from preparing
 * statements on the server.
 */
import java.net.InetAddress;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Timestamp;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.postgresql.PGConnection;
import org.postgresql.PGNotification;

public class LeaseWorker {
    static final int EXIT_DONE = 0, EXIT_RENEW_LOST = 3, EXIT_FENCED = 4, EXIT_NOT_GRANTED = 5;

    static void log(String s) {
        System.out.println(s);
        System.out.flush();
    }

    static Connection connect(String url) throws SQLException {
        Properties props = new Properties();
        // Never prepare statements on the server: PgBouncer < 1.21 cannot
        // route them in transaction mode.
        props.setProperty("prepareThreshold", "0");
        Connection c = DriverManager.getConnection(url, props);
        c.setAutoCommit(true); // each dlock call takes effect when it returns
        return c;
    }

    /** Renews the lease every ttl/3 on its own connection. */
    static final class Renewer extends Thread {
        final String url, name, owner;
        final double ttl;
        final CountDownLatch lost = new CountDownLatch(1);
        final CountDownLatch stopping = new CountDownLatch(1);
        volatile String reason;
        // The lease ends at most ttl after the request that granted or
        // renewed it was sent (monotonic clock, as the server's).
        long validUntil;

        Renewer(String url, String name, double ttl, String owner, long grantedAt) {
            this.url = url;
            this.name = name;
            this.ttl = ttl;
            this.owner = owner;
            this.validUntil = grantedAt + (long) (ttl * 1e9);
            setDaemon(true);
        }

        boolean isLost() {
            return lost.getCount() == 0;
        }

        /** The first reason stays (an event and a renewal may both tell). */
        synchronized void lose(String why) {
            if (reason == null)
                reason = why;
            lost.countDown();
        }

        @Override
        public void run() {
            Connection conn = null;
            long interval = (long) (ttl * 1000 / 3);
            try {
                while (!stopping.await(interval, TimeUnit.MILLISECONDS)) {
                    long sent = System.nanoTime();
                    Timestamp until;
                    try {
                        if (conn == null)
                            conn = connect(url);
                        try (PreparedStatement st = conn.prepareStatement(
                                "SELECT dlock_renew(?, make_interval(secs => ?), ?)")) {
                            st.setString(1, name);
                            st.setDouble(2, ttl);
                            st.setString(3, owner);
                            try (ResultSet rs = st.executeQuery()) {
                                rs.next();
                                until = rs.getTimestamp(1);
                            }
                        }
                    } catch (SQLException e) {
                        String state = e.getSQLState();
                        if (state == null || !state.startsWith("08"))
                            throw e;
                        // Connection trouble: the lease is ours until validUntil.
                        log("renewal failed (" + state + "); retrying");
                        closeQuietly(conn);
                        conn = null;
                        if (System.nanoTime() - validUntil >= 0) {
                            lose("renewals failed until the lease ended");
                            break;
                        }
                        continue;
                    }
                    if (until == null) {
                        lose("renewal returned NULL");
                        break;
                    }
                    validUntil = sent + (long) (ttl * 1e9);
                    log("renewed until " + until.toInstant());
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } catch (SQLException e) {
                lose("renewal error " + e.getSQLState() + ": " + e.getMessage());
            } finally {
                closeQuietly(conn);
            }
        }
    }

    /**
     * Listens to change events (LISTEN dlock) on its own connection, opened
     * before the grant; an end of the lease with this token makes the renewer
     * report the lease lost at once.
     */
    static final class Events extends Thread {
        static final Pattern EVENT = Pattern.compile("\"event\": \"(\\w+)\"");
        // tokens are 64-bit: compared as the digits they are
        static final Pattern TOKEN = Pattern.compile("\"token\": (\\d+)");
        static final Pattern SEQ = Pattern.compile("\"seq\": (\\d+)");
        final Connection conn;
        volatile Renewer renewer;
        volatile String token;
        volatile boolean stopping;

        Events(String url) throws SQLException {
            conn = connect(url);
            try (java.sql.Statement st = conn.createStatement()) {
                st.execute("LISTEN dlock");
            }
            setDaemon(true);
        }

        static String group(Pattern p, String s) {
            Matcher m = p.matcher(s);
            return m.find() ? m.group(1) : null;
        }

        @Override
        public void run() {
            try {
                PGConnection pg = conn.unwrap(PGConnection.class);
                while (!stopping) {
                    PGNotification[] ns = pg.getNotifications(200);
                    if (ns == null)
                        continue;
                    for (PGNotification n : ns) {
                        String ev = group(EVENT, n.getParameter());
                        Renewer r = renewer;
                        if (r != null && group(TOKEN, n.getParameter()) != null
                                && group(TOKEN, n.getParameter()).equals(token)
                                && ("forced".equals(ev) || "expired".equals(ev) || "ended".equals(ev)))
                            r.lose("lease " + ev + " (event seq " + group(SEQ, n.getParameter()) + ")");
                    }
                }
            } catch (SQLException e) {
                if (!stopping)
                    log("events: connection lost (" + e.getSQLState() + "); the renewals go on");
            } finally {
                closeQuietly(conn);
            }
        }
    }

    static void closeQuietly(Connection c) {
        if (c == null)
            return;
        try {
            c.close();
        } catch (SQLException ignored) {
        }
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            if (!argv[i].startsWith("--"))
                throw new IllegalArgumentException("unexpected argument " + argv[i]);
            a.put(argv[i].substring(2), argv[i + 1]);
        }
        if (!a.containsKey("url") || !a.containsKey("name") || argv.length % 2 != 0) {
            System.err.println("usage: LeaseWorker --url JDBC-URL --name LOCK [--owner O] [--ttl S]"
                    + " [--timeout S] [--steps N] [--step-time S] [--events-url JDBC-URL]");
            System.exit(2);
        }
        String url = a.get("url"), name = a.get("name");
        double ttl = Double.parseDouble(a.getOrDefault("ttl", "10"));
        double timeout = Double.parseDouble(a.getOrDefault("timeout", "30"));
        int steps = Integer.parseInt(a.getOrDefault("steps", "5"));
        long stepMillis = (long) (Double.parseDouble(a.getOrDefault("step-time", "1")) * 1000);
        String owner = a.getOrDefault("owner", InetAddress.getLocalHost().getHostName() + ":"
                + ProcessHandle.current().pid() + ":" + UUID.randomUUID());
        System.exit(run(url, name, owner, ttl, timeout, steps, stepMillis, a.get("events-url")));
    }

    static int run(String url, String name, String owner, double ttl, double timeout,
                   int steps, long stepMillis, String eventsUrl) throws Exception {
        // listening before the grant: none of the lease's events is missed
        Events events = eventsUrl == null ? null : new Events(eventsUrl);
        try (Connection conn = connect(url)) {
            long sent = System.nanoTime();
            Long token;
            // with events, the grant asks for them (SET LOCAL's effect, in the
            // statement itself: fine behind PgBouncer too)
            try (PreparedStatement st = conn.prepareStatement(
                    "SELECT dlock_acquire(?, make_interval(secs => ?), make_interval(secs => ?), ?)"
                    + (events == null ? "" : " FROM set_config('dlock.events', 'on', true)"))) {
                st.setString(1, name);
                st.setDouble(2, ttl);
                st.setDouble(3, timeout);
                st.setString(4, owner);
                try (ResultSet rs = st.executeQuery()) {
                    rs.next();
                    token = rs.getObject(1, Long.class);
                }
            }
            if (token == null) {
                log("not granted within " + timeout + " s");
                return EXIT_NOT_GRANTED;
            }
            log("acquired " + name + " token=" + token + " owner=" + owner);

            Renewer renewer = new Renewer(url, name, ttl, owner, sent);
            renewer.start();
            if (events != null) {
                events.token = token.toString();
                events.renewer = renewer;
                events.start();
            }
            int status = EXIT_DONE;
            try {
                for (int step = 1; step <= steps; step++) {
                    // The work of this step; cut short as soon as the lease is lost.
                    if (renewer.lost.await(stepMillis, TimeUnit.MILLISECONDS)) {
                        log("lease lost: " + renewer.reason + "; stopping work");
                        status = EXIT_RENEW_LOST;
                        break;
                    }
                    try {
                        fencedWrite(conn, name, token, step, owner);
                    } catch (SQLException e) {
                        if (!"DL001".equals(e.getSQLState()))
                            throw e;
                        log("lease lost: fenced write refused (DL001: "
                                + firstLine(e.getMessage()) + "); stopping work");
                        status = EXIT_FENCED;
                        break;
                    }
                    log("step " + step + " written");
                }
            } finally {
                renewer.stopping.countDown();
                renewer.join();
                if (events != null) {
                    events.stopping = true;
                    events.join();
                }
                // Harmless if the lease is gone: it never releases another's lease.
                try (PreparedStatement st = conn.prepareStatement("SELECT dlock_release(?, ?, ?)")) {
                    st.setString(1, name);
                    st.setString(2, owner);
                    st.setLong(3, token);
                    try (ResultSet rs = st.executeQuery()) {
                        rs.next();
                        log("released=" + rs.getBoolean(1));
                    }
                }
            }
            return status;
        }
    }

    /** The fence and the write commit together, or not at all. */
    static void fencedWrite(Connection conn, String name, long token, int step, String owner)
            throws SQLException {
        conn.setAutoCommit(false);
        try {
            try (PreparedStatement st = conn.prepareStatement("SELECT dlock_fence(?, ?)")) {
                st.setString(1, name);
                st.setLong(2, token);
                st.executeQuery().close();
            }
            try (PreparedStatement st = conn.prepareStatement(
                    "INSERT INTO job_progress (job, step, token, worker) VALUES (?, ?, ?, ?)")) {
                st.setString(1, name);
                st.setInt(2, step);
                st.setLong(3, token);
                st.setString(4, owner);
                st.executeUpdate();
            }
            conn.commit();
        } catch (SQLException e) {
            conn.rollback();
            throw e;
        } finally {
            conn.setAutoCommit(true);
        }
    }

    static String firstLine(String s) {
        int nl = s == null ? -1 : s.indexOf('\n');
        return nl < 0 ? s : s.substring(0, nl);
    }
}

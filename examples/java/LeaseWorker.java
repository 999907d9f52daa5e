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
 * returned NULL), work stopped; 4 lease lost (a fenced write was refused with
 * SQLSTATE DL001), work stopped; 5 lease not granted within --timeout; 1 error.
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

        void lose(String why) {
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
                    + " [--timeout S] [--steps N] [--step-time S]");
            System.exit(2);
        }
        String url = a.get("url"), name = a.get("name");
        double ttl = Double.parseDouble(a.getOrDefault("ttl", "10"));
        double timeout = Double.parseDouble(a.getOrDefault("timeout", "30"));
        int steps = Integer.parseInt(a.getOrDefault("steps", "5"));
        long stepMillis = (long) (Double.parseDouble(a.getOrDefault("step-time", "1")) * 1000);
        String owner = a.getOrDefault("owner", InetAddress.getLocalHost().getHostName() + ":"
                + ProcessHandle.current().pid() + ":" + UUID.randomUUID());
        System.exit(run(url, name, owner, ttl, timeout, steps, stepMillis));
    }

    static int run(String url, String name, String owner, double ttl, double timeout,
                   int steps, long stepMillis) throws Exception {
        try (Connection conn = connect(url)) {
            long sent = System.nanoTime();
            Long token;
            try (PreparedStatement st = conn.prepareStatement(
                    "SELECT dlock_acquire(?, make_interval(secs => ?), make_interval(secs => ?), ?)")) {
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

//! Every word the dashboard shows, in English and Traditional Chinese, side by side so a missing
//! translation is a compile error.

macro_rules! texts {
    ($($name:ident: $en:literal, $zh:literal;)*) => {
        pub struct Text { $(pub $name: &'static str,)* }
        pub const EN: Text = Text { $($name: $en,)* };
        pub const ZH_TW: Text = Text { $($name: $zh,)* };
    };
}

texts! {
    dashboard: "Dashboard", "管理後台";
    navigation: "Main", "主選單";
    payments: "Payments", "付款";
    payment: "Payment", "付款明細";
    balances: "Balances", "餘額";
    api_keys: "API keys", "API 金鑰";
    team: "Team", "團隊";
    audit_log: "Audit log", "稽核紀錄";
    sign_in: "Sign in", "登入";
    sign_out: "Sign out", "登出";
    email: "Email", "電子郵件";
    password: "Password", "密碼";
    set_password: "Set your password", "設定密碼";
    password_hint: "At least 12 characters.", "至少 12 個字元。";
    save: "Save", "儲存";
    wrong_credentials: "The email or password is wrong.", "電子郵件或密碼錯誤。";
    locked: "Too many failed sign-ins. Try again in 15 minutes.", "登入失敗次數過多，請 15 分鐘後再試。";
    link_invalid: "This link is used, expired or unknown. Ask an owner for a new one.", "此連結已使用、已過期或無效，請向擁有者索取新連結。";
    password_set: "Your password is set. Sign in with it.", "密碼已設定，請用它登入。";
    state: "State", "狀態";
    any_state: "Any state", "所有狀態";
    search: "Search", "搜尋";
    search_hint: "Intent id, Idempotency-Key, payer or deposit address, or transaction hash", "付款 ID、Idempotency-Key、付款人或收款地址、或交易雜湊";
    id: "ID", "ID";
    amount: "Amount", "金額";
    chain: "Chain", "鏈";
    token: "Token", "代幣";
    payer: "Payer", "付款人";
    deposit_address: "Deposit address", "收款地址";
    method: "Method", "付款方式";
    created: "Created", "建立時間";
    expires: "Expires", "到期時間";
    no_payments: "No payments match.", "沒有符合的付款。";
    next_page: "Next page", "下一頁";
    first_page: "First page", "第一頁";
    metadata: "Metadata", "中繼資料";
    timeline: "Timeline", "時間軸";
    event: "Event", "事件";
    at: "At", "時間";
    transactions: "Chain transactions", "鏈上交易";
    transaction: "Transaction", "交易";
    block: "Block", "區塊";
    confirmations: "Confirmations", "確認數";
    ledger: "Ledger entries", "帳本分錄";
    account: "Account", "帳戶";
    refunds: "Refunds", "退款";
    deliveries: "Webhook deliveries", "Webhook 傳送";
    endpoint: "Endpoint", "端點";
    attempts: "Attempts", "嘗試次數";
    response: "Response", "回應";
    none: "None.", "無。";
    cancel: "Cancel", "取消";
    cancel_payment: "Cancel this payment", "取消此付款";
    canceled_now: "The payment is canceled.", "付款已取消。";
    reason: "Reason", "原因";
    prefix: "Prefix", "前綴";
    last_used: "Last used", "最後使用";
    revoked: "Revoked", "已撤銷";
    create_key: "Create a key", "建立金鑰";
    revoke: "Revoke", "撤銷";
    rotate: "Rotate", "輪替";
    rotate_hint: "A new key; the others keep working for this many seconds.", "建立新金鑰；其他金鑰在此秒數內仍可使用。";
    overlap_seconds: "Overlap (seconds)", "重疊時間（秒）";
    secret_once: "Copy this key now: it is not shown again.", "請立即複製此金鑰：之後不會再顯示。";
    new_key: "New API key", "新的 API 金鑰";
    role: "Role", "角色";
    owner: "Owner", "擁有者";
    developer: "Developer", "開發者";
    viewer: "Viewer", "檢視者";
    invite: "Invite", "邀請";
    invite_link_once: "Send this one-time link to the person: it sets their password, works once and expires in 24 hours.", "請將此一次性連結交給對方：用於設定密碼，只能使用一次，24 小時後失效。";
    change_role: "Change role", "變更角色";
    remove: "Remove", "移除";
    pending: "Invited", "已邀請";
    active: "Active", "使用中";
    actor: "Who", "操作者";
    action: "Action", "動作";
    target: "Target", "對象";
    address: "Address", "位址";
    forbidden: "Your role does not allow this. Nothing was changed.", "您的角色無權執行此操作，未做任何變更。";
    not_found: "Not found.", "找不到。";
    bad_request: "The form was not valid. Nothing was changed.", "表單無效，未做任何變更。";
    unavailable: "The service is unavailable right now. Nothing was changed; try again.", "服務暫時無法使用，未做任何變更，請再試一次。";
    expired_form: "This form expired. Reload the page and try again.", "此表單已失效，請重新載入頁面再試一次。";
    settings: "Settings", "設定";
    display_name: "Display name", "顯示名稱";
    display_name_hint: "What payers see on checkout pages.", "付款人在結帳頁面看到的名稱。";
    saved: "Saved.", "已儲存。";
    base_units: "Base units", "最小單位";
    per_currency: "Per currency (at par)", "依幣別（以面額計）";
    currency: "Currency", "幣別";
    no_balances: "Nothing received yet.", "尚未收到任何款項。";
    payout_address: "Payout address", "商家收款地址";
    payout_address_hint: "Where orders are paid, on every chain: an address whose keys you hold.", "訂單在每條鏈上的收款地址：請填您持有私鑰的地址。";
    accepted_assets: "Accepted assets", "接受的資產";
    accepted_assets_hint: "What orders priced in a currency can be paid with. Each token is checked on its chain when added.", "以法幣計價的訂單可用這些代幣支付。新增時會在鏈上檢查代幣。";
    token_address: "Token contract address", "代幣合約地址";
    decimals: "Decimals", "小數位數";
    by_signature: "Payable by signature (EIP-3009)", "可用簽章支付（EIP-3009）";
    add_asset: "Add asset", "新增資產";
    yes: "Yes", "是";
    no: "No", "否";
    webhooks: "Webhooks", "Webhook";
    url: "URL", "網址";
    description: "Description", "說明";
    add_endpoint: "Add endpoint", "新增端點";
    rotate_secret: "Rotate secret", "輪替密鑰";
    delete: "Delete", "刪除";
    endpoint_secret_once: "Copy this signing secret now: it is not shown again.", "請立即複製此簽章密鑰：之後不會再顯示。";
    resend: "Resend", "重新傳送";
    resent: "The delivery is queued again.", "已重新排入傳送佇列。";
    send_test_event: "Send test event", "傳送測試事件";
    test_sent: "A test event is on its way.", "測試事件已送出。";
    no_endpoints: "No endpoints yet.", "尚無端點。";
    export: "Export", "匯出";
    what: "What", "內容";
    ledger_postings: "Ledger postings", "帳本分錄";
    from: "From", "起始日";
    to: "To", "結束日";
    download_csv: "Download CSV", "下載 CSV";
    export_hint: "UTF-8, RFC 4180; amounts in the token's units and in base units; dates in UTC.", "UTF-8、RFC 4180；金額同時以代幣單位與最小單位列出；日期為 UTC。";
    refund: "Refund", "退款";
    refund_amount: "Amount to refund", "退款金額";
    refund_hint: "In the token's units. Leave empty to refund all that is left.", "以代幣單位計；留空則退還剩餘全額。";
    refund_sign_hint: "Your wallet at the address that was paid signs the transfer back to the payer; this server sends it.", "由收款地址的錢包簽署退回付款人的轉帳，本服務負責送出。";
    sign_refund: "Sign with your wallet", "用錢包簽署";
    no_wallet: "No wallet found in this browser.", "此瀏覽器中找不到錢包。";
    wrong_account: "Connect the account that was paid:", "請連接收款帳戶：";
    signing: "Waiting for your wallet's signature…", "等待錢包簽署…";
    refused: "The server refused it", "伺服器拒絕了此操作";
    rejected: "You declined in your wallet.", "您已在錢包中拒絕。";
    failed: "Something went wrong:", "發生錯誤：";
    refund_to: "To", "收款人";
    language: "中文", "English";
    signed_in_as: "Signed in as", "目前登入：";
    skip_to_content: "Skip to content", "跳至主要內容";
}

/// The text of a language tag (`en` or `zh-TW`).
pub fn of(language: &str) -> &'static Text {
    if language == "zh-TW" { &ZH_TW } else { &EN }
}
